package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// TestTheDueListing: GET /admin/dispositions/due needs records:review;
// 409 until a schedule is in force; then lists each case due on its own
// date (a case closed 4 years ago is due under a 3-year item after
// closure; one closed last year is not), with its rows and no case in the
// logs; as_of previews a later day and refuses a malformed or absurd one;
// the gauge holds today's due rows by table and item.
func TestTheDueListing(t *testing.T) {
	t.Parallel()
	w := newDueAPI(t, "due listing test subject key, 32 bytes or more")
	db, do, dm, logs := w.db, w.do, w.metrics, w.logs
	for c, n := range map[int]int{41: 3, 42: 2} {
		db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			SELECT now() - interval '5 years' - make_interval(days => g), 'r', jsonb_build_object('case_id', $1::int), '{}' FROM generate_series(1, $2) g`, c, n)
	}
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES (now() - interval '2 days', 'r', '{}', '{}')`)
	review := h2Token(t, "ops:rita", "records:review")
	c, out := do("GET", "/admin/dispositions/due", h2Token(t, "ops:rita", "archive:read"), "")
	require.Equal(t, 403, c, out)
	require.Equal(t, "records:review", out["required"])
	c, out = do("GET", "/admin/dispositions/due", review, "")
	require.Equal(t, 409, c, out)
	require.Equal(t, "no_schedule_in_force", out["error"])

	c, out = do("POST", "/admin/retention/schedule", h2Token(t, "ops:alice", "records:schedule"), `{"version":"v1","items":[
		{"id":"CW-3","series":"rule_evaluations","starts":"case.closed","retain":"P3Y","authority":"GRS-2482, authorized 1998-03-20"}]}`)
	require.Equal(t, 201, c, out)
	c, out = do("POST", "/admin/retention/schedule/v1/approve", h2Token(t, "ops:bob", "records:schedule archive:purge"), "")
	require.Equal(t, 200, c, out)
	events := h2Token(t, "ops:erin", "records:events")
	for c, at := range map[string]string{"case:41": time.Now().AddDate(-4, 0, 0).Format(time.RFC3339), "case:42": time.Now().AddDate(-1, 0, 0).Format(time.RFC3339)} {
		code, out := do("POST", "/admin/subjects/"+c+"/events", events, `{"type":"case.closed","at":"`+at+`","classification":"substantiated"}`)
		require.Equal(t, 200, code, out)
	}
	c, out = do("GET", "/admin/dispositions/due", review, "")
	require.Equal(t, 200, c, out)
	require.Equal(t, "v1", out["version"])
	items := out["items"].([]any)
	require.Len(t, items, 1, "the row about no case is due 3 years after its own date; case 42 in 2 years")
	it := items[0].(map[string]any)
	require.Equal(t, "CW-3", it["item"])
	require.Equal(t, "GRS-2482, authorized 1998-03-20", it["authority"])
	require.Equal(t, 3.0, it["rows"])
	cs := it["cases"].([]any)
	require.Len(t, cs, 1)
	require.Equal(t, "case:41", cs[0].(map[string]any)["subject"])
	require.Equal(t, 3.0, cs[0].(map[string]any)["rows_hot"])
	require.Equal(t, 3.0, testutil.ToFloat64(dm.DueRows.WithLabelValues("rule_evaluations", "CW-3")))
	require.NotContains(t, logs.String(), "case:41")

	c, out = do("GET", "/admin/dispositions/due?as_of="+time.Now().AddDate(2, 1, 0).Format(time.DateOnly), review, "")
	require.Equal(t, 200, c, out)
	require.Equal(t, 5.0, out["items"].([]any)[0].(map[string]any)["rows"], "in two years and a month case 42 is due too")
	require.Equal(t, 3.0, testutil.ToFloat64(dm.DueRows.WithLabelValues("rule_evaluations", "CW-3")), "a preview does not move the gauge")
	for _, bad := range []string{"2026-13-01", "tomorrow", "9999-01-01", "0001-01-01", "2026-12-05T00:00:00Z"} {
		c, out = do("GET", "/admin/dispositions/due?as_of="+bad, review, "")
		require.Equal(t, 400, c, "%s: %v", bad, out)
	}
}

// dueAPI is an archive API over a scratch database and bucket with the
// schedules, the clocks and the due listing of rule_evaluations (its
// case_id the case), and what a test reads back.
type dueAPI struct {
	db      *kerneltest.DB
	key     subject.Key
	metrics *metrics.Dispositions
	logs    *strings.Builder
	do      func(method, path, tok, body string) (int, map[string]any)
}

func newDueAPI(t *testing.T, secret string) *dueAPI {
	t.Helper()
	ctx := context.Background()
	w := &dueAPI{db: kerneltest.NewDB(t, kerneltest.ArchivingFixture()...), logs: &strings.Builder{}}
	s3 := kerneltest.NewS3Scratch(t)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(t, err)
	w.key, err = subject.NewKey([]byte(secret))
	require.NoError(t, err)
	spec := archive.TableSpec{Table: "rule_evaluations", AgeColumn: "evaluated_at",
		Subjects: []archive.Subject{{Kind: subject.Case, SQL: "retention_subject('case', input ->> 'case_id')"}}}
	logger := slog.New(slog.NewJSONHandler(w.logs, nil))
	v, err := auth.NewVerifier(auth.Config{HS256Secret: h2Secret})
	require.NoError(t, err)
	am, err := metrics.NewAdmin(prometheus.NewRegistry())
	require.NoError(t, err)
	w.metrics, err = metrics.NewDispositions(prometheus.NewRegistry())
	require.NoError(t, err)
	sch := schedule.New(w.db.Pool, []schedule.Series{{Table: "rule_evaluations"}})
	a := &app.ArchiveAPI{Verifier: v, Metrics: am, Logger: logger, Schedules: sch, Clocks: schedule.NewClocks(w.db.Pool, w.key),
		Reader:       archiveread.New(w.db.Pool, st, s3.Service, []archive.TableSpec{spec}).WithSubjectKey(w.key),
		Dispositions: disposition.NewFinder(w.db.Pool, w.key, []archive.TableSpec{spec}, sch), DispositionMetrics: w.metrics}
	mux := app.Handler(app.HandlerDeps{Archive: a, Gatherer: prometheus.NewRegistry(), Pool: w.db.Pool, Logger: logger})
	w.do = func(method, path, tok, body string) (int, map[string]any) {
		req := httptest.NewRequest(method, "http://x"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		var out map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
		return rec.Code, out
	}
	return w
}
