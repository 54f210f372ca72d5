package archive_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// rapidSeed makes the property tests deterministic unless a seed is asked
// for (-rapid.seed=N or RAPID_SEED=N; 0 picks a random one).
const rapidSeed = "20260726"

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == "0" && os.Getenv("RAPID_SEED") == "" {
		if err := flag.Set("rapid.seed", rapidSeed); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// docs that a decode/re-encode would change: numerics beyond float64,
// escapes, key order and spacing as PostgreSQL renders them.
var verbatimDocs = []string{
	`{"id": "0190a8a0-0000-7000-8000-000000000001", "n": 0.1000000000000000055511151231257827, "big": 1e400}`,
	`{"id": "0190a8a0-0000-7000-8000-000000000002", "s": "caf\u00e9 \"q\"", "z": 12345678901234567890.123456789}`,
}

// verbatimSHA256 is `sha256sum` of the two docs above, each followed by
// "\n", computed outside Go:
//
//	printf '%s\n' '<doc 1>' '<doc 2>' | sha256sum
const verbatimSHA256 = "122660265e20254fcb8738c50553f3c3fd51cfec987299480f9b259c285ecabe"

func rowsOf(docs ...string) []archive.Row {
	rows := make([]archive.Row, len(docs))
	for i, d := range docs {
		rows[i] = archive.Row{ID: uuid.New(), At: time.Unix(int64(i), 0), Doc: d}
	}
	return rows
}

func TestEncodeNDJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		docs []string
		want string
	}{
		{"no rows", nil, ""},
		{"one row", []string{`{"a": 1}`}, "{\"a\": 1}\n"},
		{"numerics, escapes and spacing verbatim", verbatimDocs, verbatimDocs[0] + "\n" + verbatimDocs[1] + "\n"},
		{"1.10 keeps its trailing zero", []string{`{"amount": 1.10, "n": -0.0, "e": 1E+2}`}, "{\"amount\": 1.10, \"n\": -0.0, \"e\": 1E+2}\n"},
		{"big numerics", []string{`{"x": 12345678901234567890.123456789, "y": 1` + strings.Repeat("0", 400) + `}`},
			`{"x": 12345678901234567890.123456789, "y": 1` + strings.Repeat("0", 400) + "}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := archive.EncodeNDJSON(rowsOf(tt.docs...))
			require.Equal(t, tt.want, string(got))
			// One line per row, each terminated by "\n".
			require.Equal(t, len(tt.docs), strings.Count(string(got), "\n"))
			for i, line := range strings.SplitAfter(string(got), "\n")[:len(tt.docs)] {
				require.Equal(t, tt.docs[i]+"\n", line)
			}
		})
	}
}

func TestSHA256HexVector(t *testing.T) {
	t.Parallel()
	data := archive.EncodeNDJSON(rowsOf(verbatimDocs...))
	require.Equal(t, verbatimSHA256, archive.SHA256Hex(data))
	// The empty input's digest (FIPS 180-2), lower-case hex.
	require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", archive.SHA256Hex(nil))
}

func ptr[T any](v T) *T { return &v }

func sampleManifest() archive.Manifest {
	cols := []archive.Column{
		{Name: "id", DataType: "uuid", IsNullable: false, Default: ptr("uuid_generate_v7()")},
		{Name: "evaluated_at", DataType: "timestamp with time zone", Default: ptr("now()")},
		{Name: "rule_id", DataType: "character varying", CharMaxLen: ptr[int32](64)},
		{Name: "score", DataType: "numeric", IsNullable: true, NumericPrecision: ptr[int32](20)},
	}
	at := time.Date(2026, 7, 26, 12, 34, 56, 789012000, time.UTC)
	return archive.Manifest{
		Format:        archive.Format,
		ArchiveID:     uuid.MustParse("0190a8a0-1111-7222-8333-444455556666"),
		Service:       "rules",
		Table:         "rule_evaluations",
		RecordCount:   2,
		DataKey:       "retention-archives/rules/rule_evaluations/2026/07/26/0190a8a0-1111-7222-8333-444455556666.ndjson",
		ManifestKey:   "retention-archives/rules/rule_evaluations/2026/07/26/0190a8a0-1111-7222-8333-444455556666.manifest.json",
		DataSHA256:    verbatimSHA256,
		Endpoint:      "http://127.0.0.1:7070",
		Bucket:        "craig-archive",
		FirstRecordID: uuid.MustParse("0190a8a0-0000-7000-8000-000000000001"),
		LastRecordID:  uuid.MustParse("0190a8a0-0000-7000-8000-000000000002"),
		FirstRecordAt: at.Add(-100 * 24 * time.Hour),
		LastRecordAt:  at.Add(-95 * 24 * time.Hour),
		HotWindowDays: 90,
		ArchivedAt:    at,
		ArchivedBy:    archive.SystemActor,
		Columns:       cols,
		Fingerprint:   archive.Fingerprint(cols),
	}
}

func TestManifestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	m := sampleManifest()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	var got archive.Manifest
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, m, got)
	require.Equal(t, archive.Fingerprint(got.Columns), got.Fingerprint, "the fingerprint is recomputable from the decoded columns")

	// The field names are a contract (archive-fetch and security read them).
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &fields))
	want := []string{"format", "archive_id", "service", "table", "record_count", "data_key", "manifest_key",
		"data_sha256", "endpoint", "bucket", "first_record_id", "last_record_id", "first_record_at",
		"last_record_at", "hot_window_days", "archived_at", "archived_by", "columns", "fingerprint"}
	require.ElementsMatch(t, want, keysOf(fields))
	var cols []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(fields["columns"], &cols))
	for _, c := range cols {
		require.ElementsMatch(t, []string{"name", "data_type", "is_nullable", "char_max_len", "numeric_precision", "default"}, keysOf(c))
	}
	require.JSONEq(t, `null`, string(cols[0]["char_max_len"]), "an absent length is null, not 0")
	require.JSONEq(t, `"ndjson/v1"`, string(fields["format"]))
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestRangeIsMinMaxNotPositional(t *testing.T) {
	t.Parallel()
	id := func(n byte) uuid.UUID { return uuid.UUID{0x01, 0x90, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, n} }
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	tests := []struct {
		name          string
		rows          []archive.Row
		firstID       uuid.UUID
		lastID        uuid.UUID
		firstAt, last time.Time
	}{
		{
			name:    "one row",
			rows:    []archive.Row{{ID: id(5), At: day(3)}},
			firstID: id(5), lastID: id(5), firstAt: day(3), last: day(3),
		},
		{
			// Paged by age: the oldest row has the largest id (inserted late
			// with an old timestamp), so positions would invert the range.
			name: "id order reversed against age order",
			rows: []archive.Row{
				{ID: id(9), At: day(1)}, {ID: id(5), At: day(2)}, {ID: id(1), At: day(3)},
			},
			firstID: id(1), lastID: id(9), firstAt: day(1), last: day(3),
		},
		{
			name: "extremes in the middle",
			rows: []archive.Row{
				{ID: id(4), At: day(2)}, {ID: id(0xff), At: day(5)}, {ID: id(1), At: day(1)}, {ID: id(3), At: day(4)},
			},
			firstID: id(1), lastID: id(0xff), firstAt: day(1), last: day(5),
		},
		{
			// Bytes compare as PostgreSQL's uuid order does: the first byte
			// dominates, not the last.
			name: "byte order, not the last byte",
			rows: []archive.Row{
				{ID: uuid.MustParse("02000000-0000-7000-8000-000000000000"), At: day(1)},
				{ID: uuid.MustParse("01ffffff-ffff-7fff-bfff-ffffffffffff"), At: day(2)},
			},
			firstID: uuid.MustParse("01ffffff-ffff-7fff-bfff-ffffffffffff"),
			lastID:  uuid.MustParse("02000000-0000-7000-8000-000000000000"),
			firstAt: day(1), last: day(2),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			firstID, lastID, firstAt, lastAt := archive.Range(tt.rows)
			require.Equal(t, tt.firstID, firstID)
			require.Equal(t, tt.lastID, lastID)
			require.True(t, tt.firstAt.Equal(firstAt), "first at %v, want %v", firstAt, tt.firstAt)
			require.True(t, tt.last.Equal(lastAt), "last at %v, want %v", lastAt, tt.last)
			for _, r := range tt.rows {
				require.LessOrEqual(t, firstID.String(), r.ID.String())
				require.GreaterOrEqual(t, lastID.String(), r.ID.String())
			}
		})
	}
}

// columnGen draws one column; names are drawn distinct by the caller.
func columnGen() *rapid.Generator[archive.Column] {
	return rapid.Custom(func(t *rapid.T) archive.Column {
		return archive.Column{
			Name:             rapid.StringMatching(`[a-z_][a-z0-9_]{0,12}`).Draw(t, "name"),
			DataType:         rapid.SampledFrom([]string{"uuid", "text", "jsonb", "numeric", "integer", "character varying", "timestamp with time zone", "boolean"}).Draw(t, "data_type"),
			IsNullable:       rapid.Bool().Draw(t, "is_nullable"),
			CharMaxLen:       rapid.Ptr(rapid.Int32Range(0, 10485760), true).Draw(t, "char_max_len"),
			NumericPrecision: rapid.Ptr(rapid.Int32Range(0, 1000), true).Draw(t, "numeric_precision"),
			Default:          rapid.Ptr(rapid.String(), true).Draw(t, "default"),
		}
	})
}

func cloneColumns(cols []archive.Column) []archive.Column {
	out := make([]archive.Column, len(cols))
	for i, c := range cols {
		out[i] = c
		if c.CharMaxLen != nil {
			out[i].CharMaxLen = ptr(*c.CharMaxLen)
		}
		if c.NumericPrecision != nil {
			out[i].NumericPrecision = ptr(*c.NumericPrecision)
		}
		if c.Default != nil {
			out[i].Default = ptr(*c.Default)
		}
	}
	return out
}

// mutateInt32 flips a nullable integer nil↔value or changes its value.
func mutateInt32(t *rapid.T, p *int32, label string) *int32 {
	if p == nil {
		return ptr(rapid.Int32Range(0, 1<<20).Draw(t, label))
	}
	if rapid.Bool().Draw(t, label+"_to_nil") {
		return nil
	}
	return ptr(rapid.Int32Range(0, 1<<20).Filter(func(v int32) bool { return v != *p }).Draw(t, label))
}

// TestFingerprintProperty: the fingerprint is stable for an identical copy
// and changes when any attribute of any column changes, or the order does.
func TestFingerprintProperty(t *testing.T) {
	t.Parallel()
	mutations := []string{"name", "data_type", "is_nullable", "char_max_len", "numeric_precision", "default", "order", "add", "drop"}
	rapid.Check(t, func(t *rapid.T) {
		cols := rapid.SliceOfNDistinct(columnGen(), 1, 8, func(c archive.Column) string { return c.Name }).Draw(t, "columns")
		fp := archive.Fingerprint(cols)
		require.Len(t, fp, 64)
		require.Equal(t, fp, archive.Fingerprint(cloneColumns(cols)), "an identical copy has the same fingerprint")

		mutated := cloneColumns(cols)
		i := rapid.IntRange(0, len(cols)-1).Draw(t, "column")
		c := &mutated[i]
		switch kind := rapid.SampledFrom(mutations).Draw(t, "mutation"); kind {
		case "name":
			c.Name = rapid.StringMatching(`[a-z_][a-z0-9_]{0,12}`).Filter(func(s string) bool { return s != c.Name }).Draw(t, "new_name")
		case "data_type":
			c.DataType = rapid.SampledFrom([]string{"uuid", "text", "jsonb", "numeric", "bigint", "character", "date"}).Filter(func(s string) bool { return s != c.DataType }).Draw(t, "new_type")
		case "is_nullable":
			c.IsNullable = !c.IsNullable
		case "char_max_len":
			c.CharMaxLen = mutateInt32(t, c.CharMaxLen, "new_char_max_len")
		case "numeric_precision":
			c.NumericPrecision = mutateInt32(t, c.NumericPrecision, "new_numeric_precision")
		case "default":
			switch {
			case c.Default == nil:
				c.Default = ptr(rapid.String().Draw(t, "new_default")) // "" included: empty ≠ absent
			case rapid.Bool().Draw(t, "default_to_nil"):
				c.Default = nil
			default:
				old := *c.Default
				c.Default = ptr(rapid.String().Filter(func(s string) bool { return s != old }).Draw(t, "new_default"))
			}
		case "order":
			if len(mutated) < 2 {
				t.Skip("one column has no order to change")
			}
			j := rapid.IntRange(0, len(mutated)-1).Filter(func(j int) bool { return j != i }).Draw(t, "swap_with")
			mutated[i], mutated[j] = mutated[j], mutated[i]
		case "add":
			extra := columnGen().Draw(t, "extra")
			mutated = slices.Insert(mutated, rapid.IntRange(0, len(mutated)).Draw(t, "at"), extra)
		case "drop":
			mutated = slices.Delete(mutated, i, i+1)
		default:
			panic(fmt.Sprintf("unknown mutation %q", kind))
		}
		require.NotEqual(t, fp, archive.Fingerprint(mutated), "fingerprint unchanged after mutation:\n%+v\n%+v", cols, mutated)
	})
}

// TestFingerprintNilVersusZero pins the cases a lossy encoding would merge.
func TestFingerprintNilVersusZero(t *testing.T) {
	t.Parallel()
	base := archive.Column{Name: "c", DataType: "text"}
	variants := map[string]archive.Column{
		"base":                base,
		"char_max_len 0":      {Name: "c", DataType: "text", CharMaxLen: ptr[int32](0)},
		"numeric_precision 0": {Name: "c", DataType: "text", NumericPrecision: ptr[int32](0)},
		"default empty":       {Name: "c", DataType: "text", Default: ptr("")},
		"default null text":   {Name: "c", DataType: "text", Default: ptr("null")},
		"nullable":            {Name: "c", DataType: "text", IsNullable: true},
	}
	seen := map[string]string{}
	for name, c := range variants {
		fp := archive.Fingerprint([]archive.Column{c})
		if other, dup := seen[fp]; dup {
			t.Fatalf("%q and %q share fingerprint %s", name, other, fp)
		}
		seen[fp] = name
	}
}
