package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/migrations"
)

const hostileAdminToken = "hostile-admin-token-0123456789abcdefXYZ"

func hostileDeadRow(t *testing.T, db *kerneltest.DB) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO event_outbox (id, event_type, payload, created_at, dead_lettered_at, attempts, last_error, last_attempt_at)
		VALUES ($1, 'rules.evaluated', '{"child":"Jane Doe","ssn":"078-05-1120"}', now() - interval '3 days', now() - interval '1 day', 25, 'nacked', now() - interval '1 day')`, id)
	return id
}

// TestHostileOutboxAPIMalformedInput: ids in other spellings, SQL-ish
// input, huge and odd limits are refused (400) or unknown (404) and change
// nothing; no answer carries the payload.
func TestHostileOutboxAPIMalformedInput(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, migrations.Transport())
	v, err := auth.NewVerifier(auth.Config{HS256Secret: retentionSecret})
	require.NoError(t, err)
	logger := slog.New(slog.DiscardHandler)
	h := app.Handler(app.HandlerDeps{Pool: db.Pool, Gatherer: prometheus.NewRegistry(), Logger: logger,
		Outbox: &app.OutboxAPI{Pool: db.Pool, Verifier: v, Logger: logger}})
	id := hostileDeadRow(t, db)
	retrier := retentionToken(t, "ops:bob", auth.ScopeOutboxRetry)
	reader := retentionToken(t, "ops:alice", auth.ScopeOutboxRead)

	s := id.String()
	for _, raw := range []string{
		"{" + s + "}", "urn:uuid:" + s, strings.ReplaceAll(s, "-", ""), "%20" + s, s + "%20",
		"00000000-0000-0000-0000-000000000000", url.PathEscape("' OR 1=1 --"), "1%3B%20DELETE%20FROM%20event_outbox", s + "%00",
	} {
		status, body := outboxCall(t, h, http.MethodPost, "/admin/outbox/dead-letters/"+raw+"/retry", retrier)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, status, "%q: %v", raw, body)
	}
	for _, q := range []string{
		"limit=1000000000000000000000", "limit=-1", "limit=0", "limit=1e3", "limit=%201", "limit=1.5", "limit=0x10", "limit=1001",
		"limit=5000&limit=1", "after=" + url.QueryEscape("' OR 1=1 --"), "after=" + uuid.Nil.String(),
	} {
		status, body := outboxCall(t, h, http.MethodGet, "/admin/outbox/dead-letters?"+q, reader)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, status, "%q: %v", q, body)
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL AND attempts = 25 AND retried_by IS NULL", id))

	status, body := outboxCall(t, h, http.MethodGet, "/admin/outbox/dead-letters?limit=1000", reader)
	require.Equal(t, http.StatusOK, status)
	raw, _ := jsonMarshal(body)
	require.NotContains(t, string(raw), "Jane Doe", "the payload is never listed")
	require.NotContains(t, string(raw), "078-05-1120")

	// Other methods on the endpoints change nothing.
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequestWithContext(context.Background(), m, "/admin/outbox/dead-letters/"+s+"/retry", nil)
		req.Header.Set("Authorization", "Bearer "+retrier)
		rec := newRecorder()
		h.ServeHTTP(rec, req)
		require.NotEqual(t, http.StatusOK, rec.Code, m)
	}
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL", id))
}

// TestHostileOutboxAPIAdminTokenNeverLeaks: a retry with the admin token
// records system:admin_token, and neither the row, the answer nor the log
// carries the token; a wrong token is refused without echoing it.
func TestHostileOutboxAPIAdminTokenNeverLeaks(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, migrations.Transport())
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := app.Handler(app.HandlerDeps{Pool: db.Pool, Gatherer: prometheus.NewRegistry(), Logger: logger,
		Outbox: &app.OutboxAPI{Pool: db.Pool, AdminToken: hostileAdminToken, Logger: logger}})
	id := hostileDeadRow(t, db)

	status, body := outboxCall(t, h, http.MethodPost, "/admin/outbox/dead-letters/"+id.String()+"/retry", hostileAdminToken+"x")
	require.Equal(t, http.StatusUnauthorized, status)
	raw, _ := jsonMarshal(body)
	require.NotContains(t, string(raw), hostileAdminToken)

	status, body = outboxCall(t, h, http.MethodPost, "/admin/outbox/dead-letters/"+id.String()+"/retry", hostileAdminToken)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "system:admin_token", body["retried_by"])
	raw, _ = jsonMarshal(body)
	require.NotContains(t, string(raw), hostileAdminToken)
	require.NotContains(t, string(raw), "Jane Doe")
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND retried_by = 'system:admin_token'", id))
	require.Zero(t, db.Count(t, "SELECT count(*) FROM event_outbox WHERE retried_by LIKE '%' || $1 || '%' OR last_error LIKE '%' || $1 || '%'", hostileAdminToken))
	require.Contains(t, logs.String(), "outbox dead letter returned to the drain")
	require.Contains(t, logs.String(), "system:admin_token")
	require.NotContains(t, logs.String(), hostileAdminToken)
	require.NotContains(t, logs.String(), "Jane Doe")
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
