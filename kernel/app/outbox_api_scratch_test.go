package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/migrations"
)

// countingPublisher confirms every message except those refuse says no
// to, and counts what it confirmed per id.
type countingPublisher struct {
	mu        sync.Mutex
	confirmed map[uuid.UUID]int
	refuse    func(outbox.Message) bool
}

func (p *countingPublisher) Publish(_ context.Context, m outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse != nil && p.refuse(m) {
		return errors.New("broker returned it: unroutable")
	}
	p.confirmed[m.ID]++
	return nil
}

func (p *countingPublisher) count(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.confirmed[id]
}

// outboxCall calls the outbox API with a bearer token.
func outboxCall(t *testing.T, h http.Handler, method, path, bearer string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader("{}"))
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec.Code, body
}

// TestOutboxDeadLettersAPI: a poison row goes dead after its attempts; the
// listing shows it (attempts, last error, ages; never the payload) to
// outbox:read; a retry needs outbox:retry, records who, and the next drain
// publishes it exactly once; a retry of a row that is no longer a dead
// letter, an unknown id or a malformed one changes nothing.
func TestOutboxDeadLettersAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	v, err := auth.NewVerifier(auth.Config{HS256Secret: retentionSecret})
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := app.Handler(app.HandlerDeps{Pool: db.Pool, Gatherer: prometheus.NewRegistry(), Logger: logger,
		Outbox: &app.OutboxAPI{Pool: db.Pool, Verifier: v, Logger: logger}})

	poison, err := outbox.Stage(ctx, db.Pool, outbox.Envelope{EventType: "rules.unbound", Payload: json.RawMessage(`{"child":"Jane Doe"}`)})
	require.NoError(t, err)
	fixed := false
	pub := &countingPublisher{confirmed: map[uuid.UUID]int{}, refuse: func(m outbox.Message) bool { return m.ID == poison && !fixed }}
	d := &outbox.Drainer{Pool: db.Pool, Publisher: pub, Logger: logger, MaxAttempts: 2, RetryBackoff: time.Nanosecond}
	for range 3 {
		_, err := d.DrainOnce(ctx)
		require.NoError(t, err)
	}

	reader, retrier := retentionToken(t, "ops:alice", auth.ScopeOutboxRead), retentionToken(t, "ops:bob", auth.ScopeOutboxRetry)
	status, body := outboxCall(t, h, http.MethodGet, "/admin/outbox/dead-letters", reader)
	require.Equal(t, http.StatusOK, status, body)
	require.EqualValues(t, 1, body["total"])
	list := body["dead_letters"].([]any)
	require.Len(t, list, 1)
	dl := list[0].(map[string]any)
	require.Equal(t, poison.String(), dl["id"])
	require.EqualValues(t, 2, dl["attempts"])
	require.Equal(t, "broker returned it: unroutable", dl["last_error"])
	require.NotContains(t, dl, "payload", "the payload is never listed")
	require.Positive(t, dl["payload_bytes"])

	status, body = outboxCall(t, h, http.MethodGet, "/admin/outbox/dead-letters", retrier)
	require.Equal(t, http.StatusForbidden, status, "outbox:retry does not read")
	require.Equal(t, auth.ScopeOutboxRead, body["required"])
	path := "/admin/outbox/dead-letters/" + poison.String() + "/retry"
	status, _ = outboxCall(t, h, http.MethodPost, path, reader)
	require.Equal(t, http.StatusForbidden, status, "outbox:read does not retry")
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL AND attempts = 2", poison))

	for _, bad := range []struct {
		path   string
		status int
	}{
		{"/admin/outbox/dead-letters/not-a-uuid/retry", http.StatusBadRequest},
		{"/admin/outbox/dead-letters/" + uuid.New().String() + "/retry", http.StatusNotFound},
		{"/admin/outbox/dead-letters?limit=0", http.StatusBadRequest},
		{"/admin/outbox/dead-letters?limit=1001", http.StatusBadRequest},
		{"/admin/outbox/dead-letters?after=" + uuid.New().String(), http.StatusNotFound},
	} {
		method := http.MethodPost
		if strings.Contains(bad.path, "?") {
			method = http.MethodGet
		}
		tok := retrier
		if method == http.MethodGet {
			tok = reader
		}
		status, body := outboxCall(t, h, method, bad.path, tok)
		require.Equal(t, bad.status, status, "%s: %v", bad.path, body)
	}

	fixed = true // the binding was added
	status, body = outboxCall(t, h, http.MethodPost, path, retrier)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "ops:bob", body["retried_by"])
	var by string
	var attempts int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT retried_by, attempts FROM event_outbox WHERE id = $1 AND dead_lettered_at IS NULL AND retried_at IS NOT NULL", poison).Scan(&by, &attempts))
	require.Equal(t, "ops:bob", by)
	require.Zero(t, attempts, "attempts reset")

	status, body = outboxCall(t, h, http.MethodPost, path, retrier)
	require.Equal(t, http.StatusConflict, status, "a second retry: it is pending now")
	require.Equal(t, "pending", body["state"])

	for range 3 {
		_, err := d.DrainOnce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, 1, pub.count(poison), "published exactly once after the retry")
	status, body = outboxCall(t, h, http.MethodPost, path, retrier)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "published", body["state"])
	status, body = outboxCall(t, h, http.MethodGet, "/admin/outbox/dead-letters", reader)
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 0, body["total"])
	require.Empty(t, body["dead_letters"])
}
