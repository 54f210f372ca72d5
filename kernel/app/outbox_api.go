package app

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/outbox"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OutboxAPI serves the outbox's dead letters (ADR-075) on every service:
// GET /admin/outbox/dead-letters (outbox:read) and POST
// /admin/outbox/dead-letters/{id}/retry (outbox:retry). A JWT with the
// scope, or the admin_token, is accepted (tokenGate); the retry records who.
type OutboxAPI struct {
	Pool       *pgxpool.Pool
	Verifier   *auth.Verifier
	AdminToken string
	Metrics    *metrics.Admin
	Logger     *slog.Logger
}

func (a *OutboxAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/outbox/dead-letters", a.list)
	mux.HandleFunc("POST /admin/outbox/dead-letters/{id}/retry", a.retry)
}

func (a *OutboxAPI) gate() tokenGate {
	return tokenGate{Verifier: a.Verifier, AdminToken: a.AdminToken, Metrics: a.Metrics, Logger: a.Logger, What: "outbox API"}
}

// list answers a page of dead letters: ?limit=1..1000 (100), ?after=<id>
// (the previous page's next).
func (a *OutboxAPI) list(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.gate().allow(w, r, auth.ScopeOutboxRead); !ok {
		return
	}
	q := r.URL.Query()
	limit := 0
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > outbox.MaxDeadLetterPage {
			writeError(w, http.StatusBadRequest, "invalid_request", "limit must be a whole number from 1 to "+strconv.Itoa(outbox.MaxDeadLetterPage), nil)
			return
		}
		limit = n
	}
	var after uuid.UUID
	if raw := q.Get("after"); raw != "" {
		id, ok := parseEventID(raw)
		if !ok {
			writeError(w, http.StatusBadRequest, "invalid_request", "after must be an event id (a UUID)", nil)
			return
		}
		after = id
	}
	page, err := outbox.ListDeadLetters(r.Context(), a.Pool, after, limit)
	if err != nil {
		a.refuse(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// retry returns one dead letter to the drain.
func (a *OutboxAPI) retry(w http.ResponseWriter, r *http.Request) {
	actor, ok := a.gate().allow(w, r, auth.ScopeOutboxRetry)
	if !ok {
		return
	}
	id, ok := parseEventID(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request", "the id must be an event id (a UUID)", nil)
		return
	}
	out, err := outbox.RetryDeadLetter(r.Context(), a.Pool, id, actor)
	if err != nil {
		a.refuse(w, r, err)
		return
	}
	a.Logger.InfoContext(r.Context(), "outbox dead letter returned to the drain", slog.String("event_id", out.ID.String()),
		slog.String("event_type", out.EventType), slog.String("actor", actor), slog.String("last_error", out.LastError))
	writeJSON(w, http.StatusOK, out)
}

// refuse answers a listing's or retry's error: 404 for an unknown event,
// 409 naming the state of one that is not a dead letter, 400 for a bad
// request, 500 (logged) otherwise.
func (a *OutboxAPI) refuse(w http.ResponseWriter, r *http.Request, err error) {
	var nd *outbox.NotDeadLetteredError
	switch {
	case errors.As(err, &nd):
		writeError(w, http.StatusConflict, "not_dead_lettered", nd.Error(), map[string]any{"state": nd.State})
	case errors.Is(err, outbox.ErrNoSuchEvent):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case errors.Is(err, outbox.ErrBadDeadLetterRequest):
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
	default:
		if r.Context().Err() == nil {
			a.Logger.ErrorContext(r.Context(), "outbox API request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		}
		writeError(w, http.StatusInternalServerError, "internal", "the outbox could not be read; see the service's log", nil)
	}
}

// parseEventID parses an event id in its hyphenated 36-character form, in
// either letter case (one event, one id); braces, urn: prefixes, the
// dashless form and the nil UUID are refused.
func parseEventID(raw string) (uuid.UUID, bool) {
	id, err := uuid.Parse(raw)
	return id, err == nil && id.String() == strings.ToLower(raw) && id != uuid.Nil
}
