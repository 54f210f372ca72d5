package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDispositionBatches: POST /admin/dispositions freezes what is due
// and unheld, bounded by its limit (a first case larger than the limit is
// a batch alone), lists its cases by subject for the reviewers, and
// reports the held ones; a case is in one open batch at most; a reject
// with extend_until keeps the batch's cases off the listing until that
// day and records who and why; a decided batch is not decided again; bad
// requests change nothing.
func TestDispositionBatches(t *testing.T) {
	t.Parallel()
	w := newDueAPI(t, "batch test subject key, 32 bytes or more!!!!!")
	db, key, do := w.db, w.key, w.do
	// Case 51's rows are the oldest: it is due first.
	for c, n := range map[int]int{51: 3, 52: 2, 53: 4} {
		db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			SELECT now() - make_interval(years => 5 + ($1::int = 51)::int, days => g), 'r', jsonb_build_object('case_id', $1::int), '{}'
			FROM generate_series(1, $2) g`, c, n)
	}
	review := h2Token(t, "ops:rita", "records:review")
	c, out := do("POST", "/admin/retention/schedule", h2Token(t, "ops:alice", "records:schedule"), `{"version":"v1","items":[
		{"id":"CW-3","series":"rule_evaluations","starts":"record","retain":"P3Y","authority":"GRS-2482"}]}`)
	require.Equal(t, 201, c, out)
	c, out = do("POST", "/admin/retention/schedule/v1/approve", h2Token(t, "ops:bob", "records:schedule archive:purge"), "")
	require.Equal(t, 200, c, out)
	// A subject hold on case 53, stored as the lifecycle manager stores
	// one (the API under test serves no manager).
	db.Exec(t, `INSERT INTO archive_holds (title, reason, created_by, subject_hashes) VALUES ('t', 'r', 'ops:carol', ARRAY[$1::bytea])`,
		key.Hash(mustParse(t, "case:53")))

	for _, bad := range []string{`{"limit":0}`, `{"limit":-5}`, `{"limit":2000000}`, `{"limit":"9"}`, `{"lim":1}`} {
		c, out = do("POST", "/admin/dispositions", review, bad)
		require.Equal(t, 400, c, "%s: %v", bad, out)
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM dispositions`))
	c, out = do("POST", "/admin/dispositions", h2Token(t, "ops:rita", "archive:read"), `{}`)
	require.Equal(t, 403, c, out)

	c, out = do("POST", "/admin/dispositions", review, `{"limit":2}`)
	require.Equal(t, 201, c, out)
	first := out["disposition_id"].(string)
	require.Equal(t, "proposed", out["status"])
	require.Equal(t, 3.0, out["rows"], "case 51 (3 rows) alone: a case is disposed whole")
	require.Equal(t, "case:51", out["items"].([]any)[0].(map[string]any)["cases"].([]any)[0].(map[string]any)["subject"])
	require.Len(t, out["held"], 1, "case 53 is held")

	c, out = do("POST", "/admin/dispositions", review, `{}`)
	require.Equal(t, 201, c, out)
	second := out["disposition_id"].(string)
	cases := out["items"].([]any)[0].(map[string]any)["cases"].([]any)
	require.Len(t, cases, 1, "case 51 is in the first batch")
	require.Equal(t, "case:52", cases[0].(map[string]any)["subject"])
	c, out = do("POST", "/admin/dispositions", review, `{}`)
	require.Equal(t, 409, c, out)
	require.Equal(t, "nothing_due", out["error"])

	c, out = do("GET", "/admin/dispositions/due", review, "")
	require.Equal(t, 200, c, out)
	for _, cs := range out["items"].([]any)[0].(map[string]any)["cases"].([]any) {
		m := cs.(map[string]any)
		if m["subject"] != "case:53" {
			require.NotNil(t, m["disposition_id"], "%v is in a batch", m["subject"])
		}
	}

	until := time.Now().UTC().AddDate(0, 6, 0).Format(time.DateOnly)
	for body, want := range map[string]int{`{"reason":""}`: 400, `{"reason":"hearing","extend_until":"2020-01-01"}`: 400,
		`{"reason":"hearing","extend_until":"soon"}`: 400, `{"reason":"hearing","extend_until":"2999-01-01"}`: 400} {
		c, out = do("POST", "/admin/dispositions/"+first+"/reject", review, body)
		require.Equal(t, want, c, "%s: %v", body, out)
	}
	c, out = do("POST", "/admin/dispositions/"+first+"/reject", review, `{"reason":"fair hearing 2026-114","extend_until":"`+until+`"}`)
	require.Equal(t, 200, c, out)
	require.Equal(t, "rejected", out["status"])
	require.Equal(t, until, out["extend_until"])
	require.Equal(t, "ops:rita", out["rejected_by"])
	c, out = do("POST", "/admin/dispositions/"+first+"/reject", review, `{"reason":"again"}`)
	require.Equal(t, 409, c, out)
	c, out = do("POST", "/admin/dispositions/"+second+"/reject", review, `{"reason":"not this week"}`)
	require.Equal(t, 200, c, out)
	c, out = do("GET", "/admin/dispositions/00000000-0000-0000-0000-000000000000", review, "")
	require.Equal(t, 404, c, out)

	c, out = do("GET", "/admin/dispositions/due", review, "")
	require.Equal(t, 200, c, out)
	var subjects []string
	for _, cs := range out["items"].([]any)[0].(map[string]any)["cases"].([]any) {
		subjects = append(subjects, cs.(map[string]any)["subject"].(string))
	}
	require.ElementsMatch(t, []string{"case:52", "case:53"}, subjects, "case 51 is extended; case 52 is due again")
	c, out = do("GET", "/admin/dispositions/due?as_of="+time.Now().UTC().AddDate(0, 6, 1).Format(time.DateOnly), review, "")
	require.Equal(t, 200, c, out)
	require.Len(t, out["items"].([]any)[0].(map[string]any)["cases"], 3, "the day after the extension, case 51 is due again")
	require.Zero(t, db.Count(t, `SELECT count(*) FROM disposition_cases WHERE strpos(encode(subject_box, 'escape'), 'case') > 0`))
}
