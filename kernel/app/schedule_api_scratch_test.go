package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
)

const scheduleDoc = `version: "2026-01"
items:
  - id: CW-3
    series: rule_evaluations
    starts: record
    retain: P3Y
    authority: GRS-2482, authorized 1998-03-20
`

// TestTheScheduleIsProposedAndApprovedByTwo: one identity proposes, a
// second approves; the proposer cannot; a version that brings destruction
// nearer needs archive:purge on its approval; a bad document is 400 naming
// the item and the field, and changes nothing; a version is never
// replaced; the GET shows the settings until one is approved, then the
// version in force and the history.
func TestTheScheduleIsProposedAndApprovedByTwo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, kerneltest.ArchivingFixture()...)
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) SELECT now() - make_interval(days => g), 'r', '{}', '{}' FROM generate_series(1, 7) g`)
	v, err := auth.NewVerifier(auth.Config{HS256Secret: h2Secret})
	require.NoError(t, err)
	am, err := metrics.NewAdmin(prometheus.NewRegistry())
	require.NoError(t, err)
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	a := &app.ArchiveAPI{Verifier: v, Metrics: am, Logger: logger,
		Schedules: schedule.New(db.Pool, []schedule.Series{{Table: "rule_evaluations", RetentionDays: 0}})}
	mux := app.Handler(app.HandlerDeps{Archive: a, Gatherer: prometheus.NewRegistry(), Pool: db.Pool, Logger: logger})
	do := func(method, path, tok, body string) (int, map[string]any) {
		req := httptest.NewRequest(method, "http://x"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		var out map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out), w.Body.String())
		return w.Code, out
	}
	alice := h2Token(t, "ops:alice", "records:schedule")
	bob := h2Token(t, "ops:bob", "records:schedule")
	bobPurge := h2Token(t, "ops:bob", "records:schedule archive:purge")
	reader := h2Token(t, "ops:dana", "archive:read")

	c, out := do("GET", "/admin/retention/schedule", reader, "")
	require.Equal(t, 200, c, out)
	require.Nil(t, out["in_force"])
	require.Equal(t, "permanent", out["settings"].(map[string]any)["items"].([]any)[0].(map[string]any)["retain"], "no date set: never due")

	c, out = do("POST", "/admin/retention/schedule", alice, strings.Replace(scheduleDoc, "    authority: GRS-2482, authorized 1998-03-20\n", "", 1))
	require.Equal(t, 400, c, out)
	require.Equal(t, "invalid_schedule", out["error"])
	p := out["problems"].([]any)[0].(map[string]any)
	require.Equal(t, "authority", p["field"])
	require.Equal(t, "CW-3", p["id"])
	c, out = do("POST", "/admin/retention/schedule", alice, strings.Replace(scheduleDoc, "rule_evaluations", "audit_log", 1))
	require.Equal(t, 400, c, out)
	require.Contains(t, out["message"], `"audit_log" is not an archived table`)
	c, out = do("POST", "/admin/retention/schedule", reader, scheduleDoc)
	require.Equal(t, 403, c, out)
	require.Equal(t, "records:schedule", out["required"])
	c, out = do("GET", "/admin/retention/schedule", reader, "")
	require.Equal(t, 200, c)
	require.Empty(t, out["history"], "nothing refused was recorded")

	c, out = do("POST", "/admin/retention/schedule", alice, scheduleDoc)
	require.Equal(t, 201, c, out)
	require.Equal(t, map[string]any{"version": "2026-01", "status": "proposed", "nearer": float64(7), "nearer_series": []any{"rule_evaluations"}}, out,
		"the settings never destroyed rule_evaluations (no date): P3Y brings its 7 rows nearer")
	c, out = do("POST", "/admin/retention/schedule", bob, scheduleDoc)
	require.Equal(t, 409, c, out)
	require.Equal(t, "version_exists", out["error"])

	c, out = do("POST", "/admin/retention/schedule/2026-01/approve", alice, "")
	require.Equal(t, 403, c, out)
	require.Equal(t, "self_approval", out["error"])
	c, out = do("POST", "/admin/retention/schedule/2026-01/approve", h2Token(t, "OPS:Alice", "records:schedule archive:purge"), "")
	require.Equal(t, 403, c, out)
	require.Equal(t, "self_approval", out["error"], "the proposer in another spelling")
	c, out = do("POST", "/admin/retention/schedule/2026-01/approve", bob, "")
	require.Equal(t, 403, c, out)
	require.Equal(t, "archive:purge", out["required"], "destruction nearer: the approver needs archive:purge")
	c, out = do("POST", "/admin/retention/schedule/nope/approve", bobPurge, "")
	require.Equal(t, 404, c, out)
	c, out = do("POST", "/admin/retention/schedule/2026-01/approve", bobPurge, "")
	require.Equal(t, 200, c, out)
	require.Equal(t, "in_force", out["status"])
	require.Equal(t, "ops:bob", out["approved_by"])
	c, out = do("POST", "/admin/retention/schedule/2026-01/approve", bobPurge, "")
	require.Equal(t, 409, c, out)

	longer := strings.NewReplacer(`"2026-01"`, `"2026-02"`, "P3Y", "P5Y").Replace(scheduleDoc)
	c, out = do("POST", "/admin/retention/schedule", alice, longer)
	require.Equal(t, 201, c, out)
	require.Equal(t, float64(0), out["nearer"], "five years keeps every row longer than three")
	c, out = do("POST", "/admin/retention/schedule/2026-02/approve", bob, "")
	require.Equal(t, 200, c, out, "nothing nearer: records:schedule is enough")

	c, out = do("GET", "/admin/retention/schedule", reader, "")
	require.Equal(t, 200, c, out)
	require.Equal(t, "2026-02", out["in_force"].(map[string]any)["version"])
	require.Nil(t, out["settings"])
	hist := out["history"].([]any)
	require.Len(t, hist, 2)
	require.Equal(t, "in_force", hist[0].(map[string]any)["status"])
	require.Equal(t, "superseded", hist[1].(map[string]any)["status"])

	_, err = db.Pool.Exec(ctx, `UPDATE retention_schedules SET document = '{}' WHERE version = '2026-01'`)
	require.ErrorContains(t, err, "append-only")
	_, err = db.Pool.Exec(ctx, `DELETE FROM retention_schedules`)
	require.ErrorContains(t, err, "append-only")
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM archive_lifecycle_log WHERE action = 'schedule_approved'`))
}

// TestCaseEventsMoveTheClock: a case event typed by hand moves the case's
// clock (kept by the keyed hash, never the number); an event older than
// the clock's last change is 409 stale_event and changes nothing; a
// malformed one is 400; the scope is records:events.
func TestCaseEventsMoveTheClock(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, kerneltest.ArchivingFixture()...)
	v, err := auth.NewVerifier(auth.Config{HS256Secret: h2Secret})
	require.NoError(t, err)
	am, err := metrics.NewAdmin(prometheus.NewRegistry())
	require.NoError(t, err)
	key, err := subject.NewKey([]byte("case clock test subject key, 32 bytes or more"))
	require.NoError(t, err)
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	a := &app.ArchiveAPI{Verifier: v, Metrics: am, Logger: logger, Clocks: schedule.NewClocks(db.Pool, key)}
	mux := app.Handler(app.HandlerDeps{Archive: a, Gatherer: prometheus.NewRegistry(), Pool: db.Pool, Logger: logger})
	events := h2Token(t, "ops:erin", "records:events")
	do := func(path, tok, body string) (int, map[string]any) {
		req := httptest.NewRequest("POST", "http://x"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		var out map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out), w.Body.String())
		return w.Code, out
	}
	c, out := do("/admin/subjects/case:17/events", events, `{"type":"case.closed","at":"2020-03-01T00:00:00Z","classification":"unsubstantiated"}`)
	require.Equal(t, 200, c, out)
	require.Equal(t, "closed", out["state"])
	require.Equal(t, "2020-03-01T00:00:00Z", out["closed_at"])
	c, out = do("/admin/subjects/case:17/events", events, `{"type":"case.reopened","at":"2019-01-01T00:00:00Z"}`)
	require.Equal(t, 409, c, out)
	require.Equal(t, "stale_event", out["error"])
	c, out = do("/admin/subjects/case:0017/events", events, `{"type":"case.reopened","at":"2021-01-01T00:00:00+02:00"}`)
	require.Equal(t, 200, c, "the same case spelled otherwise: %v", out)
	require.Equal(t, "reopened", out["state"])
	c, out = do("/admin/subjects/case:17/events", events, `{"type":"case.merged","at":"2022-01-01T00:00:00Z","into":"case:18"}`)
	require.Equal(t, 200, c, out)
	require.Equal(t, true, out["merged"])
	for body, why := range map[string]string{
		`{"type":"case.opened","at":"2022-01-01T00:00:00Z"}`:                            "unknown type",
		`{"type":"case.closed","at":"2022-01-01"}`:                                      "a date is not a time",
		`{"type":"case.closed","at":"2999-01-01T00:00:00Z","classification":"x"}`:       "the future",
		`{"type":"case.closed","at":"2023-01-01T00:00:00Z"}`:                            "no classification",
		`{"type":"case.merged","at":"2023-01-01T00:00:00Z","into":"case:17"}`:           "into itself",
		`{"type":"case.merged","at":"2023-01-01T00:00:00Z","into":"person:4"}`:          "into a person",
		`{"type":"case.reopened","at":"2023-01-01T00:00:00Z","classification":"x"}`:     "a classification on a reopening",
		`{"type":"case.closed","at":"2023-01-01T00:00:00Z","classification":"x","z":1}`: "an unknown key",
	} {
		c, out = do("/admin/subjects/case:17/events", events, body)
		require.Equal(t, 400, c, "%s: %v", why, out)
	}
	c, out = do("/admin/subjects/person:17/events", events, `{"type":"case.closed","at":"2022-01-01T00:00:00Z","classification":"x"}`)
	require.Equal(t, 400, c, out)
	c, out = do("/admin/subjects/case:17/events", h2Token(t, "ops:erin", "records:schedule"), `{"type":"case.reopened","at":"2023-01-01T00:00:00Z"}`)
	require.Equal(t, 403, c, out)
	require.Equal(t, "records:events", out["required"])

	require.Equal(t, int64(3), db.Count(t, `SELECT count(*) FROM case_clock_events`), "the accepted events only")
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM case_clocks WHERE state = 'merged' AND changed_at = '2022-01-01T00:00:00Z'`))
	c17, err := subject.Parse("case:17")
	require.NoError(t, err)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM case_clocks WHERE subject_hash = $1 AND merged_into = $2`, key.Hash(c17),
		key.Hash(mustParse(t, "case:18"))), "kept by the keyed hashes, never the number")
}

func mustParse(t *testing.T, s string) subject.Subject {
	t.Helper()
	sub, err := subject.Parse(s)
	require.NoError(t, err)
	return sub
}
