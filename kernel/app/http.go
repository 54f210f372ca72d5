package app

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/craig/retention/kernel/outbox"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Request limits of the admin API.
const (
	// maxAdminBody is far above any valid replay request; larger bodies
	// are refused rather than read.
	maxAdminBody = 64 << 10
	// readinessTimeout bounds the database ping behind /readyz.
	readinessTimeout = 2 * time.Second
)

// HandlerDeps is what the HTTP surface needs.
type HandlerDeps struct {
	Pool     *pgxpool.Pool
	Gatherer prometheus.Gatherer
	// Replay bounds POST /admin/events/replay (clamp, row cap, batch size).
	Replay outbox.ReplayLimits
	// Broker, when set, makes /readyz answer 503 while the publisher is
	// disconnected from the broker.
	Broker interface{ Connected() bool }
	// AdminToken, when non-empty, is the bearer token /admin/ requires.
	AdminToken string
	// Archive, when set, serves the authenticated archive API.
	Archive *ArchiveAPI
	// Retention, when set, serves GET /admin/retention.
	Retention *RetentionAPI
	// Outbox, when set, serves the outbox's dead letters.
	Outbox *OutboxAPI
	Logger *slog.Logger
}

// Handler serves /metrics, /healthz, /readyz and the admin API.
func Handler(d HandlerDeps) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readinessTimeout)
		defer cancel()
		if err := d.Pool.Ping(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "database unreachable"})
			return
		}
		if d.Broker != nil && !d.Broker.Connected() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "broker unreachable"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("POST /admin/events/replay", d.admin(http.HandlerFunc(d.replay)))
	if d.Archive != nil {
		d.Archive.routes(mux)
	}
	if d.Retention != nil {
		d.Retention.routes(mux)
	}
	if d.Outbox != nil {
		d.Outbox.routes(mux)
	}
	return mux
}

// admin requires the bearer token when one is configured.
func (d HandlerDeps) admin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.AdminToken != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(d.AdminToken)) != 1 {
				writeError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token (admin_token) is required", nil)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ReplayRequest is the body of POST /admin/events/replay: re-publish the
// outbox rows created in [from, to).
type ReplayRequest struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// ReplayResponse is the success body.
type ReplayResponse struct {
	Replayed int64     `json:"replayed"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
}

// ErrReplayRequest is wrapped by a replay body that is not exactly one JSON
// object {"from": RFC3339, "to": RFC3339} with both set.
var ErrReplayRequest = errors.New("invalid replay request")

// ParseReplayRequest reads the body of POST /admin/events/replay: exactly
// one JSON object, no unknown field, nothing after it, both times set.
func ParseReplayRequest(body io.Reader) (ReplayRequest, error) {
	var req ReplayRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf(`%w: body must be {"from": RFC3339, "to": RFC3339}: %w`, ErrReplayRequest, err)
	}
	// Exactly one JSON object: trailing data ({…}garbage, a second object)
	// is refused, not ignored.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, fmt.Errorf(`%w: body must be exactly one JSON object {"from": RFC3339, "to": RFC3339}, with nothing after it`, ErrReplayRequest)
	}
	if req.From.IsZero() || req.To.IsZero() {
		return req, fmt.Errorf("%w: from and to are both required (RFC3339 timestamps)", ErrReplayRequest)
	}
	return req, nil
}

func (d HandlerDeps) replay(w http.ResponseWriter, r *http.Request) {
	req, err := ParseReplayRequest(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", strings.TrimPrefix(err.Error(), ErrReplayRequest.Error()+": "), nil)
		return
	}
	n, err := outbox.Replay(r.Context(), d.Pool, req.From, req.To, d.Replay)
	var oow *outbox.ReplayOutOfWindowError
	var big *outbox.ReplayTooLargeError
	switch {
	case errors.As(err, &oow):
		writeError(w, http.StatusBadRequest, "replay_out_of_window", oow.Error(), map[string]any{
			"window_days": oow.WindowDays, "cutoff": oow.Cutoff,
		})
		return
	case errors.As(err, &big):
		writeError(w, http.StatusBadRequest, "replay_too_large", big.Error(), map[string]any{
			"count": big.Count, "max_rows": big.MaxRows,
		})
		return
	case errors.Is(err, outbox.ErrInvalidReplayRange):
		writeError(w, http.StatusBadRequest, "invalid_range", err.Error(), nil)
		return
	case err != nil:
		d.Logger.ErrorContext(r.Context(), "admin replay failed", slog.Any("error", err), slog.Int64("replayed_before_failure", n))
		writeError(w, http.StatusInternalServerError, "internal", "replay failed; see the service log", map[string]any{"replayed": n})
		return
	}
	d.Logger.InfoContext(r.Context(), "admin replay re-queued outbox rows",
		slog.Int64("replayed", n), slog.Time("from", req.From), slog.Time("to", req.To),
		slog.String("remote", r.RemoteAddr))
	writeJSON(w, http.StatusOK, ReplayResponse{Replayed: n, From: req.From, To: req.To})
}

func writeError(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	body := map[string]any{"error": code, "message": msg}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
