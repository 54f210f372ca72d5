package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/identity"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/jsonstrict"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/schedule"
)

// ArchiveAPI is the authenticated archive lifecycle API of an archiving
// service (/admin/archive/…), served only when a token key is configured.
type ArchiveAPI struct {
	Verifier *auth.Verifier
	Metrics  *metrics.Admin
	Logger   *slog.Logger
	// Lifecycle runs records, retention, holds and purges.
	Lifecycle *lifecycle.Manager
	// Engine runs manual passes; nil when the archiver is disabled (run and
	// purge answer 403 archiver_disabled naming Knob).
	Engine *archive.Engine
	Knob   string
	// Reader answers for archived rows: reads need only a configured
	// store, not the archiver's consent (nil: no store; reads answer 503
	// store_not_configured naming StoreKnob).
	Reader    *archiveread.Reader
	StoreKnob string
	// VerifyMetrics count verification failures.
	VerifyMetrics *metrics.Verify
	// SubjectKeyKnob is archive.subject_key_file's environment variable,
	// named when a subject call finds no key.
	SubjectKeyKnob string
	// Orders carries out court orders (seal, expunge); nil without a
	// store (the calls answer 503 store_not_configured).
	Orders *courtorder.Orders
	// Journal is the service's journal of acts (ADR-070): while the
	// database is behind the store's journal, every call but the
	// listings and verify answers 503 restored_behind_journal. Nil: none.
	Journal *journal.Journal
	// Schedules are the service's records schedule versions (ADR-073).
	Schedules *schedule.Schedules
	// Clocks keep the service's case clocks (ADR-073).
	Clocks *schedule.Clocks
	// CaseEvents counts the case events typed by hand (nil: not counted).
	CaseEvents *metrics.CaseEvents
	// Dispositions finds what the schedule makes due (nil: no store or no
	// subject key); DispositionMetrics are its gauges.
	Dispositions       *disposition.Finder
	DispositionMetrics *metrics.Dispositions
}

// journalExempt are the calls served while the database is behind the
// store's journal: listings of the ledger, the holds, a purge and the
// orders, and verify, which change nothing and name no row.
var journalExempt = map[string]bool{
	"GET /admin/archive/records": true, "GET /admin/archive/holds": true, "GET /admin/archive/purges/{id}": true,
	"POST /admin/archive/verify": true, "GET /admin/subjects/orders": true, "GET /admin/retention/schedule": true,
	"GET /admin/archive/purges": true, "GET /admin/archive/certificates": true,
}

// routes registers the archive API on mux.
func (a *ArchiveAPI) routes(mux *http.ServeMux) {
	mux.Handle("POST /admin/archive/run", a.require(auth.ScopeRun, a.run))
	mux.Handle("GET /admin/archive/records", a.require(auth.ScopeRead, a.records))
	mux.Handle("PUT /admin/archive/records/{archive_id}/retention", a.require(auth.ScopeHold, a.retention))
	mux.Handle("POST /admin/archive/holds", a.require(auth.ScopeHold, a.placeHold))
	mux.Handle("GET /admin/archive/holds", a.require(auth.ScopeRead, a.holds))
	mux.Handle("POST /admin/archive/holds/{id}/release", a.require(auth.ScopeHold, a.releaseHold))
	mux.Handle("POST /admin/archive/purge", a.require(auth.ScopePurge, a.purge))
	mux.Handle("POST /admin/archive/purges/{id}/approve", a.require(auth.ScopePurge, a.approve))
	mux.Handle("GET /admin/archive/purges/{id}", a.require(auth.ScopeRead, a.purgeView))
	mux.Handle("GET /admin/archive/rows/{table}/{id}", a.require(auth.ScopeRead, a.row))
	mux.Handle("POST /admin/archive/verify", a.require(auth.ScopeRead, a.verify))
	mux.Handle("POST /admin/archive/gc", a.require(auth.ScopePurge, a.gc))
	mux.Handle("GET /admin/archive/rows/{table}", a.require(auth.ScopeRead, a.rows))
	mux.Handle("GET /admin/subjects/{subject}/rows", a.require(auth.ScopeRead, a.subjectRows))
	a.courtOrderRoutes(mux)
	a.scheduleRoutes(mux)
	a.dispositionRoutes(mux)
	a.actsRoutes(mux)
}

// handlerFunc is an archive API handler with its authenticated principal.
type handlerFunc func(w http.ResponseWriter, r *http.Request, p auth.Principal)

// require authenticates the bearer token and checks scope: 401 with
// WWW-Authenticate for a missing or invalid token, 403 insufficient_scope
// naming the scope for a valid one without it. Every refusal is logged
// (never the token) and counted.
func (a *ArchiveAPI) require(scope string, next handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var p auth.Principal
		var err error
		if !ok || strings.TrimSpace(raw) == "" {
			err = &auth.Error{Reason: auth.ReasonMissing, Err: errors.New("no bearer token")}
		} else {
			p, err = a.Verifier.Verify(r.Context(), strings.TrimSpace(raw))
		}
		if err == nil && reservedActor(p.Subject) {
			err = &auth.Error{Reason: auth.ReasonClaims, Err: fmt.Errorf("sub %q is reserved (system: and cli: actors are not API identities)", p.Subject)}
		}
		var ae *auth.Error
		if errors.As(err, &ae) {
			a.refuse(r, ae.Reason, ae)
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token"})
			return
		}
		if !p.Has(scope) {
			a.refuse(r, auth.ReasonScope, fmt.Errorf("%s lacks %s", p.Subject, scope))
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope", "required": scope})
			return
		}
		if err := a.Journal.Err(); err != nil && !journalExempt[r.Pattern] {
			a.fail(w, r, err)
			return
		}
		next(w, r, p)
	})
}

// reservedActor: actors the kernel writes itself can never be a token's.
func reservedActor(sub string) bool {
	return identity.HasReservedPrefix(sub, "system:", CLIActorPrefix)
}

func (a *ArchiveAPI) refuse(r *http.Request, reason string, err error) {
	a.Metrics.AuthFailures.WithLabelValues(reason).Inc()
	a.Logger.WarnContext(r.Context(), "archive API request refused", slog.String("reason", reason), slog.String("method", r.Method),
		slog.String("route", route(r)), slog.String("remote", r.RemoteAddr), slog.String("error", err.Error()))
}

// decode reads exactly one JSON object into v (an empty body is {}).
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err == nil {
		err = jsonstrict.CheckKeys(body, v)
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body exceeds %d bytes", maxAdminBody), nil)
			return false
		}
		writeError(w, http.StatusBadRequest, "invalid_request", "body: "+err.Error(), nil)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return true
	}
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("nothing may follow the JSON object")
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "body: "+err.Error(), nil)
		return false
	}
	return true
}

// fail maps a lifecycle error to its answer.
func (a *ArchiveAPI) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, journal.ErrBehind), errors.Is(err, journal.ErrDiverged), errors.Is(err, journal.ErrUnchecked):
		writeError(w, http.StatusServiceUnavailable, RestoredBehindJournal, err.Error()+"; see the runbook, \"After restoring a database\"", nil)
	case errors.Is(err, journal.ErrNotStored):
		a.Logger.ErrorContext(r.Context(), "an act is done but its journal entry is not in the store yet", slog.String("route", route(r)), slog.Any("error", err))
		writeError(w, http.StatusServiceUnavailable, "journal_not_stored", "the act is done and recorded in the database; its copy in the store could not be written yet (retried by the next act, verify, or this call again)", nil)
	case errors.Is(err, archiveread.ErrOrderRef):
		writeError(w, http.StatusForbidden, "order_ref_mismatch", "the order reference does not open this seal: a sealed read names the order that sealed the subject", nil)
	case errors.Is(err, archiveread.ErrNoSubjectKey):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "subject_key_not_configured", "knob": a.SubjectKeyKnob})
	case errors.Is(err, lifecycle.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
	case errors.Is(err, lifecycle.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case errors.Is(err, lifecycle.ErrPurged):
		writeError(w, http.StatusConflict, "purged", err.Error(), nil)
	case errors.Is(err, lifecycle.ErrAlreadyRunning), errors.Is(err, archive.ErrAlreadyRunning):
		writeJSON(w, http.StatusConflict, map[string]string{"error": "already_running"})
	case errors.Is(err, lifecycle.ErrSelfApproval):
		writeError(w, http.StatusForbidden, "self_approval", err.Error(), nil)
	case errors.Is(err, lifecycle.ErrShortens):
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope", "required": auth.ScopePurge, "message": err.Error()})
	case errors.Is(err, lifecycle.ErrHeldPurged):
		writeError(w, http.StatusConflict, "purged", err.Error(), nil)
	case errors.Is(err, lifecycle.ErrNoSubjectKey):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "subject_key_not_configured", "knob": a.SubjectKeyKnob})
	case errors.Is(err, lifecycle.ErrNotIndexed):
		writeError(w, http.StatusConflict, "subjects_not_indexed", err.Error(), nil)
	case errors.Is(err, lifecycle.ErrNotAwaiting):
		writeError(w, http.StatusConflict, "not_awaiting_approval", err.Error(), nil)
	case errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, "cancelled", "the request was cancelled", nil)
	default:
		a.Logger.ErrorContext(r.Context(), "archive API call failed", slog.String("route", route(r)), slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "internal", "the call failed; see the service log", nil)
	}
}

// unreadable answers 503 when no store is configured for reads.
func (a *ArchiveAPI) unreadable(w http.ResponseWriter) bool {
	if a.Reader != nil {
		return false
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "store_not_configured", "knob": a.StoreKnob})
	return true
}

func (a *ArchiveAPI) disabled(w http.ResponseWriter) bool {
	if a.Engine != nil {
		return false
	}
	writeJSON(w, http.StatusForbidden, map[string]string{"error": "archiver_disabled", "knob": a.Knob})
	return true
}

// route is what a log line says of a request: the route's pattern
// ("GET /admin/subjects/{subject}/rows"), never its path, which may name a
// subject in clear.
func route(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " (no route)"
}
