package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/migrations"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func newServer(t *testing.T, token string) (*httptest.Server, *kerneltest.DB) {
	t.Helper()
	db := kerneltest.NewDB(t, migrations.Transport())
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(app.Handler(app.HandlerDeps{
		Pool: db.Pool, Gatherer: reg, Replay: outbox.ReplayLimits{OutboxWindowDays: 30, MaxAgeDays: 30, MaxRows: 100_000, BatchSize: 5000}, AdminToken: token,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(srv.Close)
	return srv, db
}

func postReplay(t *testing.T, srv *httptest.Server, token string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/admin/events/replay", bytes.NewReader(b))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func TestReplayClamp(t *testing.T) {
	t.Parallel()
	srv, db := newServer(t, "")
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
		('a', '{}', now() - interval '2 days', now() - interval '2 days'),
		('b', '{}', now() - interval '29 days', now() - interval '29 days'),
		('c', '{}', now() - interval '40 days', now() - interval '40 days')`)
	now := time.Now()

	t.Run("in window", func(t *testing.T) {
		code, body := postReplay(t, srv, "", map[string]any{"from": now.Add(-29*24*time.Hour - time.Hour), "to": now})
		require.Equal(t, http.StatusOK, code, body)
		require.EqualValues(t, 2, body["replayed"])
		require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL`))
	})
	t.Run("older than the window is refused naming it", func(t *testing.T) {
		code, body := postReplay(t, srv, "", map[string]any{"from": now.Add(-41 * 24 * time.Hour), "to": now.Add(-39 * 24 * time.Hour)})
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, "replay_out_of_window", body["error"])
		require.EqualValues(t, 30, body["window_days"])
		require.Contains(t, body["message"], "30")
		require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'c' AND published_at IS NOT NULL`), "nothing changed")
	})
	t.Run("inverted range", func(t *testing.T) {
		code, body := postReplay(t, srv, "", map[string]any{"from": now, "to": now.Add(-time.Hour)})
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, "invalid_range", body["error"])
	})
	t.Run("missing bound", func(t *testing.T) {
		code, body := postReplay(t, srv, "", map[string]any{"from": now})
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, "invalid_request", body["error"])
	})
}

func TestAdminTokenRequiredWhenConfigured(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, "s3cret")
	now := time.Now()
	code, body := postReplay(t, srv, "", map[string]any{"from": now.Add(-time.Hour), "to": now})
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, "unauthorized", body["error"])
	code, _ = postReplay(t, srv, "wrong", map[string]any{"from": now.Add(-time.Hour), "to": now})
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = postReplay(t, srv, "s3cret", map[string]any{"from": now.Add(-time.Hour), "to": now})
	require.Equal(t, http.StatusOK, code, body)
}

func TestHealthReadinessAndMetrics(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, "")
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
}

// postRaw posts body as it is to the replay endpoint.
func postRaw(t *testing.T, srv *httptest.Server, body string) (int, map[string]any) {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+"/admin/events/replay", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// TestReplayRefusesTrailingData: {…}garbage and two
// objects were accepted (the first object replayed).
func TestReplayRefusesTrailingData(t *testing.T) {
	t.Parallel()
	srv, db := newServer(t, "")
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
		('a', '{}', now() - interval '2 days', now() - interval '2 days')`)
	from := time.Now().Add(-3 * 24 * time.Hour).UTC().Format(time.RFC3339)
	to := time.Now().UTC().Format(time.RFC3339)
	obj := `{"from": "` + from + `", "to": "` + to + `"}`
	for name, body := range map[string]string{
		"Garbage":       obj + "garbage",
		"TwoObjects":    obj + obj,
		"TrailingComma": obj + ",",
		"Array":         "[" + obj + "]",
	} {
		code, out := postRaw(t, srv, body)
		require.Equal(t, http.StatusBadRequest, code, name)
		require.Equal(t, "invalid_request", out["error"], name)
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL`), "nothing was replayed")
	code, out := postRaw(t, srv, obj+"\n  \n")
	require.Equal(t, http.StatusOK, code, "trailing whitespace is fine")
	require.EqualValues(t, 1, out["replayed"])
}

// TestReplayTooLarge: a range over
// replay_max_rows is 400 replay_too_large naming the count.
func TestReplayTooLarge(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, migrations.Transport())
	srv := httptest.NewServer(app.Handler(app.HandlerDeps{
		Pool: db.Pool, Gatherer: prometheus.NewRegistry(),
		Replay: outbox.ReplayLimits{OutboxWindowDays: 30, MaxAgeDays: 30, MaxRows: 3, BatchSize: 2},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(srv.Close)
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'a', '{}', now() - interval '1 day', now() FROM generate_series(1, 4)`)
	now := time.Now()
	code, body := postReplay(t, srv, "", map[string]any{"from": now.Add(-2 * 24 * time.Hour), "to": now})
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "replay_too_large", body["error"])
	require.EqualValues(t, 4, body["count"])
	require.EqualValues(t, 3, body["max_rows"])
	require.Zero(t, db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL`))

	db.Exec(t, `DELETE FROM event_outbox WHERE id = (SELECT min(id::text)::uuid FROM event_outbox)`)
	code, body = postReplay(t, srv, "", map[string]any{"from": now.Add(-2 * 24 * time.Hour), "to": now})
	require.Equal(t, http.StatusOK, code, body)
	require.EqualValues(t, 3, body["replayed"], "3 rows in batches of 2")
}
