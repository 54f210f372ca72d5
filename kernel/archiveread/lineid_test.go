package archiveread

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestLineID: the to_jsonb prefix is read directly, anything else decoded,
// and a line without a valid id is an error, never a zero id.
func TestLineID(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0193a1b2-0000-7000-8000-00000000002a")
	cases := []struct {
		name string
		line string
		want uuid.UUID
		err  bool
	}{
		{"to_jsonb order", `{"id": "` + id.String() + `", "input": {"n": 1}}`, id, false},
		{"id alone", `{"id": "` + id.String() + `"}`, id, false},
		{"a shorter key first", `{"a": 1, "id": "` + id.String() + `"}`, id, false},
		{"compact JSON", `{"id":"` + id.String() + `"}`, id, false},
		{"upper case", `{"id": "` + "0193A1B2-0000-7000-8000-00000000002A" + `"}`, id, false},
		{"no id", `{"rule_id": "r"}`, uuid.Nil, true},
		{"null id", `{"id": null}`, uuid.Nil, true},
		{"not a uuid in the prefix", `{"id": "` + "zzzzzzzz-0000-7000-8000-00000000002a" + `"}`, uuid.Nil, true},
		{"prefix cut short", `{"id": "0193a1b2`, uuid.Nil, true},
		{"not JSON", `garbage`, uuid.Nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := lineID([]byte(tc.line))
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
