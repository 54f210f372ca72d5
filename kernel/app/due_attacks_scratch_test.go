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

// TestAttackSubMicrosecondStaleEvent: POST /admin/subjects/{subject}/events
// takes RFC 3339 with nanoseconds, the clock keeps microseconds. An event
// clearly older than the clock's last change is refused (409); at the same
// microsecond, a closure or a merger does not replace the clock, a
// reopening does (once): an event 998ns older than a closure no longer
// passes as newer because the stored time lost its nanoseconds.
func TestAttackSubMicrosecondStaleEvent(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, kerneltest.ArchivingFixture()...)
	key, err := subject.NewKey([]byte("hostile stale test subject key, 32 bytes or more"))
	require.NoError(t, err)
	v, err := auth.NewVerifier(auth.Config{HS256Secret: h2Secret})
	require.NoError(t, err)
	am, err := metrics.NewAdmin(prometheus.NewRegistry())
	require.NoError(t, err)
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	a := &app.ArchiveAPI{Verifier: v, Metrics: am, Logger: logger, Schedules: schedule.New(db.Pool, []schedule.Series{{Table: "rule_evaluations"}}),
		Clocks: schedule.NewClocks(db.Pool, key)}
	mux := app.Handler(app.HandlerDeps{Archive: a, Gatherer: prometheus.NewRegistry(), Pool: db.Pool, Logger: logger})
	do := func(path, body string) (int, map[string]any) {
		req := httptest.NewRequest("POST", "http://x"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+h2Token(t, "ops:erin", "records:events"))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		var out map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out), w.Body.String())
		return w.Code, out
	}
	c, out := do("/admin/subjects/case:71/events", `{"type":"case.closed","at":"2026-03-01T00:00:00.000000999Z","classification":"substantiated"}`)
	require.Equal(t, 200, c, out)
	// A clearly older event is refused (the guarantee holds at µs scale).
	c, out = do("/admin/subjects/case:71/events", `{"type":"case.reopened","at":"2026-02-28T23:59:59.999999Z"}`)
	require.Equal(t, 409, c, out)

	// Kept to the microsecond: a closure 998ns older than the clock's last
	// change is at the same microsecond, and only a reopening is applied
	// there (the order is unknown; a reopened case keeps its records).
	c, out = do("/admin/subjects/case:72/events", `{"type":"case.reopened","at":"2026-03-01T00:00:00.000000999Z"}`)
	require.Equal(t, 200, c, out)
	require.Equal(t, "2026-03-01T00:00:00Z", out["changed_at"], "the answer is what the clock keeps")
	c, out = do("/admin/subjects/case:72/events", `{"type":"case.closed","at":"2026-03-01T00:00:00.000000001Z","classification":"x"}`)
	require.Equal(t, 409, c, "a closure at the reopening's microsecond: %v", out)
	c, out = do("/admin/subjects/case:71/events", `{"type":"case.reopened","at":"2026-03-01T00:00:00.000000001Z"}`)
	require.Equal(t, 200, c, "a reopening at the closure's microsecond wins: %v", out)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM case_clocks WHERE subject_hash = $1 AND state = 'closed'`, key.Hash(mustParse(t, "case:71"))))
	c, out = do("/admin/subjects/case:71/events", `{"type":"case.reopened","at":"2026-03-01T00:00:00.0000005Z"}`)
	require.Equal(t, 409, c, "a second reopening at the same microsecond changes nothing: %v", out)
}

var _ = context.Background
