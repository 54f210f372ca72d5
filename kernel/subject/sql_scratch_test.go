package subject_test

import (
	"context"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/migrate"
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
		{"1234567890123456789012345678901", nil}, {"17.5", nil}, {"1.7e1", nil}, {"-17", nil},
		{"seventeen", nil}, {"", nil}, {"case-", nil}, {"person-17", nil}, {"case-17x", nil}, {"１７", nil}, {"١٧", nil},
		{"17 18", nil}, {"\x00", nil},
		// Every Unicode white space and format character around the value,
		// a '+' or '#' before the digits, and '-', ':', '_', '/' or nothing
		// (spaces around it) between the kind and the number (all NULL in
		// the first version).
		{"\u200317\u2003", ptr("case:17")}, {"\u202f17", ptr("case:17")}, {"\u200717", ptr("case:17")}, {"\u300017", ptr("case:17")},
		{"\ufeff17", ptr("case:17")}, {"17\u200b", ptr("case:17")}, {"\u206017\u200e", ptr("case:17")}, {"\u2028case-17\u2029", ptr("case:17")},
		{"+17", ptr("case:17")}, {"#17", ptr("case:17")}, {"#017", ptr("case:17")}, {"case 17", ptr("case:17")}, {"case_17", ptr("case:17")},
		{"case17", ptr("case:17")}, {"case/17", ptr("case:17")}, {"case- 17", ptr("case:17")}, {"case - 17", ptr("case:17")},
		{"Case #17", ptr("case:17")}, {"case--17", nil}, {"casey17", nil}, {"case-+-17", nil}, {"++17", nil}, {"#-17", nil},
		{"1 7", nil}, {"17-18", nil}, {"[17]", nil}, {"17#", nil},
		// More of Unicode's white space and format characters, trimmed:
		// next line, soft hyphen, the Arabic letter mark, bidi isolates
		// (user interfaces wrap user text in them), interlinear
		// annotation anchors, language tags.
		{"\u008517\u0085", ptr("case:17")}, {"\u00ad17", ptr("case:17")}, {"\u061c17", ptr("case:17")}, {"\u206617\u2069", ptr("case:17")},
		{"\u206817\u2069", ptr("case:17")}, {"\ufff917", ptr("case:17")}, {"\U000e000117", ptr("case:17")}, {"17\U000e0020", ptr("case:17")},
		// A bidi embedding or override makes a value ambiguous: U+202E
		// "71" reads as 17, U+202E "17" as 71. Never a case.
		{"\u202e71", nil}, {"\u202e17", nil}, {"71\u202e", nil}, {"\u202d17\u202c", nil}, {"case-\u202b17", nil},
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

// TestRetentionSubjectUpgradeRebuildsIndexes: a database migrated before
// the second version of retention_subject gets it with its expression
// indexes rebuilt: an index lookup finds a '+17' row written before the
// upgrade, which the first version mapped to NULL.
func TestRetentionSubjectUpgradeRebuildsIndexes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, transportBefore(t, "00009"))
	db.Exec(t, `CREATE TABLE notes (id int PRIMARY KEY, case_id text)`)
	db.Exec(t, `CREATE INDEX notes_case_idx ON notes (retention_subject('case', case_id))`)
	db.Exec(t, `INSERT INTO notes SELECT g, g::text FROM generate_series(1, 2000) AS g`)
	db.Exec(t, `INSERT INTO notes VALUES (0, '+17'), (-1, E'\u200317')`)
	db.Exec(t, `ANALYZE notes`)
	_, err := migrate.Up(ctx, stdlib.OpenDBFromPool(db.Pool), []migrations.Set{migrations.Transport()}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	var plan string
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (FORMAT TEXT) SELECT id FROM notes WHERE retention_subject('case', case_id) = 'case:17'`).Scan(&plan))
	require.Contains(t, plan, "notes_case_idx", "the lookup reads the index")
	rows, err := tx.Query(ctx, `SELECT id FROM notes WHERE retention_subject('case', case_id) = 'case:17' ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{-1, 0, 17}, ids, "the index was rebuilt with the second version")
}

// TestRetentionSubjectFastPathAgrees: the third version of
// retention_subject (plain digits answered without the regular expression)
// answers exactly as the second for every spelling of
// TestRetentionSubjectSQL, every number below 20,000 with and without
// leading zeros, every length of digits around the 30-digit bound, and a
// seeded corpus of 20,000 values drawn from the characters the spellings
// use.
func TestRetentionSubjectFastPathAgrees(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	installV2(t, db)

	var in []string
	for i := range 20_000 {
		n := strconv.Itoa(i)
		in = append(in, n, "0"+n, "00"+n, n+" ", "+"+n, n+".0", "case-"+n, "CASE:0"+n, "Case_"+n, "case/"+n, "case"+n, "person-"+n, "case--"+n, "case- "+n)
	}
	for l := 1; l <= 33; l++ {
		for _, d := range []string{strings.Repeat("9", l), "1" + strings.Repeat("0", l-1), strings.Repeat("0", l), "0" + strings.Repeat("7", l)} {
			in = append(in, d, "case-"+d, "CASE"+d)
		}
	}
	alphabet := []string{"0", "1", "7", "9", " ", "+", "#", "-", ":", "_", "/", ".", "e", "case", "CASE", "person", "\u00a0", "\u2003", "\ufeff",
		"\u202e", "\u200b", "x", "١", "１", "Case", "cAsE", "PERSON", "ſ", "\u212a", "00", "-:", "/_"}
	rng := rand.New(rand.NewPCG(45, 76))
	for range 20_000 {
		var s strings.Builder
		for range 1 + rng.IntN(8) {
			s.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		in = append(in, s.String())
	}
	rows, err := db.Pool.Query(ctx, `SELECT format('%L: %s, was %s', v, coalesce(retention_subject('case', v), 'NULL'), coalesce(retention_subject_v2('case', v), 'NULL'))
		FROM unnest($1::text[]) AS v
		WHERE retention_subject('case', v) IS DISTINCT FROM retention_subject_v2('case', v)`, in)
	require.NoError(t, err)
	diffs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, diffs[:min(len(diffs), 10)], "the fast path answers as the regular expression does (%d values differ)", len(diffs))
	var subjects int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(retention_subject('case', v)) FROM unnest($1::text[]) AS v`, in).Scan(&subjects))
	require.Greater(t, subjects, 200_000, "the corpus holds subjects, not only values that are none")
	var nulls int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (VALUES (retention_subject('case', NULL)), (retention_subject(NULL, '17'))) AS x (s) WHERE s IS NULL`).Scan(&nulls))
	require.Equal(t, 2, nulls, "a NULL kind or value answers NULL, as when the function was STRICT")
}

// transportBefore is the transport migration set without its files from
// prefix on: a database as an older release left it, to migrate up.
func transportBefore(t *testing.T, prefix string) migrations.Set {
	t.Helper()
	first := fstest.MapFS{}
	entries, err := fs.ReadDir(migrations.Transport().FS, ".")
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() >= prefix {
			continue
		}
		b, err := fs.ReadFile(migrations.Transport().FS, e.Name())
		require.NoError(t, err)
		first[e.Name()] = &fstest.MapFile{Data: b}
	}
	return migrations.New(migrations.TransportSetName, first)
}

// installV2 installs the second version of retention_subject, as the
// third's down migration (transport 00011) restores it, as
// retention_subject_v2: what the third must answer exactly as.
func installV2(t *testing.T, db *kerneltest.DB) {
	t.Helper()
	b, err := fs.ReadFile(migrations.Transport().FS, "00011_retention_subject_fast_path.sql")
	require.NoError(t, err)
	_, down, ok := strings.Cut(string(b), "-- +goose Down")
	require.True(t, ok)
	body := down[strings.Index(down, "CREATE OR REPLACE FUNCTION") : strings.LastIndex(down, "$$;")+3]
	db.Exec(t, strings.Replace(body, "FUNCTION retention_subject(", "FUNCTION retention_subject_v2(", 1))
}
