package subject_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/migrations"
)

// TestRetentionSubjectSQL: the database's canonical spelling
// (retention_subject, transport set) gives one subject for every spelling
// a table may hold of one number, NULL for anything else, never an error,
// and always a spelling Parse accepts as canonical.
func TestRetentionSubjectSQL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	cases := []struct {
		in   string
		want *string
	}{
		{"17", ptr("case:17")}, {"017", ptr("case:17")}, {" 17", ptr("case:17")}, {"17 ", ptr("case:17")},
		{"17\t", ptr("case:17")}, {"\n17\n", ptr("case:17")}, {"17\u00a0", ptr("case:17")},
		{"17.0", ptr("case:17")}, {"17.000", ptr("case:17")}, {"case-17", ptr("case:17")}, {"CASE:17", ptr("case:17")},
		{"Case-0017", ptr("case:17")}, {"0", ptr("case:0")}, {"000", ptr("case:0")},
		{"0000000000000000000000000000000000017", ptr("case:17")},
		{"123456789012345678901234567890", ptr("case:123456789012345678901234567890")},
		{"1234567890123456789012345678901", nil}, {"17.5", nil}, {"1.7e1", nil}, {"-17", nil}, {"+17", nil},
		{"seventeen", nil}, {"", nil}, {"case-", nil}, {"person-17", nil}, {"case-17x", nil}, {"１７", nil}, {"١٧", nil},
		{"17 18", nil}, {"case - 17", nil}, {"\x00", nil},
	}
	for _, c := range cases {
		if c.in == "\x00" {
			continue // text cannot hold NUL: no row can
		}
		var got *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT retention_subject('case', $1)`, c.in).Scan(&got), "%q", c.in)
		require.Equal(t, c.want, got, "%q", c.in)
		if got != nil {
			require.True(t, subject.IsCanonical(*got), "%q gives %q, which Parse does not take as canonical", c.in, *got)
		}
	}
	var null *string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT retention_subject('case', NULL)`).Scan(&null))
	require.Nil(t, null)
	// JSON numbers as a table's jsonb column renders them (->>).
	for in, want := range map[string]*string{`17`: ptr("case:17"), `17.0`: ptr("case:17"), `1.70e1`: ptr("case:17"), `1.7e1`: ptr("case:17"),
		`"17"`: ptr("case:17"), `17.5`: nil, `null`: nil, `[17]`: nil, `{"a": 17}`: nil, `true`: nil, `1e40`: nil} {
		var got *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT retention_subject('case', jsonb_build_object('case_id', $1::jsonb) ->> 'case_id')`, in).Scan(&got), in)
		require.Equal(t, want, got, in)
	}
}

func ptr(s string) *string { return &s }
