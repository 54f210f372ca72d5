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
	"strconv"
	"strings"
	"time"

	"github.com/craig/retention/kernel/jsonstrict"

	"github.com/craig/retention/kernel/identity"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
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
}

// journalExempt are the calls served while the database is behind the
// store's journal: listings of the ledger, the holds, a purge and the
// orders, and verify, which change nothing and name no row.
var journalExempt = map[string]bool{
	"GET /admin/archive/records": true, "GET /admin/archive/holds": true, "GET /admin/archive/purges/{id}": true,
	"POST /admin/archive/verify": true, "GET /admin/subjects/orders": true,
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
}

// StreamSilence bounds a stream by silence, not by its length: every write
// of a range stream gets this long from its start (the server's 2-minute
// write timeout would otherwise cut a long stream mid-line, with no error
// line). A client that stops reading for this long ends the stream; one that
// reads keeps it going however long the range (craigctl's --timeout bounds
// the silence on its side the same way).
const StreamSilence = 2 * time.Minute

// countingWriter counts what reached the client and extends the
// connection's write deadline before every write (StreamSilence).
type countingWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	n  int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.rc == nil {
		c.rc = http.NewResponseController(c.w)
	}
	_ = c.rc.SetWriteDeadline(time.Now().Add(StreamSilence)) // a test recorder has no deadline to set
	if c.n == 0 {
		c.w.Header().Set("Content-Type", "application/x-ndjson")
		c.w.WriteHeader(http.StatusOK)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// rows streams, as NDJSON, every archived row of a table whose age is in
// [from, to), each object verified before its lines are sent; an error after
// the first line ends the stream with one {"error": …} line.
func (a *ArchiveAPI) rows(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.unreadable(w) {
		return
	}
	from, err1 := time.Parse(time.RFC3339Nano, r.URL.Query().Get("from"))
	to, err2 := time.Parse(time.RFC3339Nano, r.URL.Query().Get("to"))
	if err1 != nil || err2 != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "from and to are required RFC 3339 times", nil)
		return
	}
	rd, ok := a.reader(w, r, p)
	if !ok {
		return
	}
	cw := &countingWriter{w: w}
	sum, err := rd.Range(r.Context(), cw, r.PathValue("table"), from, to, p.Subject)
	n := sum.ArchivedRows + sum.HotRows
	switch {
	case err == nil && cw.n == 0:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	case err == nil:
	case cw.n > 0:
		a.Logger.ErrorContext(r.Context(), "archive range read stopped", slog.Int("rows_sent", n), slog.Any("error", err))
		line := map[string]any{"error": "internal"}
		switch {
		case errors.Is(err, archiveread.ErrCorrupt):
			line = corruptBody(err)
		case errors.Is(err, archiveread.ErrUnreadable):
			line = unreadableBody(err)
		}
		_ = json.NewEncoder(w).Encode(line)
	case errors.Is(err, archiveread.ErrInvalidRange):
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
	case errors.Is(err, archiveread.ErrUnknownTable):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case errors.Is(err, archiveread.ErrCorrupt):
		writeJSON(w, http.StatusConflict, corruptBody(err))
	case errors.Is(err, archiveread.ErrUnreadable):
		writeJSON(w, http.StatusBadGateway, unreadableBody(err))
	default:
		a.fail(w, r, err)
	}
}

// corruptBody is the answer about an archive no stored version of which
// matches its ledger: it names the archive (and the object).
func unreadableBody(err error) map[string]any {
	body := map[string]any{"error": "archive_unreadable"}
	var ue *archiveread.UnreadableError
	if errors.As(err, &ue) {
		body["archive_id"], body["key"] = ue.ArchiveID, ue.Key
	}
	return body
}

func corruptBody(err error) map[string]any {
	body := map[string]any{"error": "archive_corrupt"}
	var ce *archiveread.CorruptError
	if errors.As(err, &ce) {
		body["archive_id"], body["key"] = ce.ArchiveID, ce.Key
	}
	return body
}

// gc collects the orphans under the service's prefix (objects no local
// ledger row names, older than older_than_days ≥ 1), or lists them (dry run).
func (a *ArchiveAPI) gc(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.disabled(w) || a.unreadable(w) {
		return
	}
	var req struct {
		OlderThanDays *int `json:"older_than_days"`
		DryRun        bool `json:"dry_run"`
		// Keys, when given, are the only objects collected (those a dry
		// run showed the operator).
		Keys []string `json:"keys"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.OlderThanDays == nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "older_than_days is required (at least 1)", nil)
		return
	}
	if req.Keys != nil && len(req.Keys) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request", "keys: name at least one object, or leave keys out", nil)
		return
	}
	rep, err := a.Reader.CollectOrphans(r.Context(), *req.OlderThanDays, req.DryRun, p.Subject, req.Keys...)
	switch {
	case errors.Is(err, archiveread.ErrGCInvalid):
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
	case errors.Is(err, archiveread.ErrGCBusy):
		writeJSON(w, http.StatusConflict, map[string]string{"error": "already_running"})
	case err != nil:
		a.fail(w, r, err)
	default:
		writeJSON(w, http.StatusOK, rep)
	}
}

// maxVerifyLimit bounds one verify call's archives.
const maxVerifyLimit = 100_000

// verify checks the ledger's archives against the store (deep: their
// contents too) and reports failures, column drift and orphans.
func (a *ArchiveAPI) verify(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	if a.unreadable(w) {
		return
	}
	var req struct {
		Deep  bool `json:"deep"`
		Limit *int `json:"limit"`
	}
	if !decode(w, r, &req) {
		return
	}
	limit := 0
	if req.Limit != nil {
		if limit = *req.Limit; limit < 1 || limit > maxVerifyLimit {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("limit must be between 1 and %d", maxVerifyLimit), nil)
			return
		}
	}
	rep, err := a.Reader.Verify(r.Context(), req.Deep, limit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.VerifyMetrics.Observe(rep.FailureKinds(), rep.OrphanCount)
	if rep.Failed > 0 {
		a.Logger.WarnContext(r.Context(), "archive verification found failures", slog.Int("failed", rep.Failed), slog.Int("checked", rep.Checked))
	}
	writeJSON(w, http.StatusOK, rep)
}

// row answers for one row by id: hot table first, then the verified
// archive that holds it (404 neither, 409 archive_corrupt, 410 purged).
func (a *ArchiveAPI) row(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.unreadable(w) {
		return
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "id: not a uuid", nil)
		return
	}
	rd, ok := a.reader(w, r, p)
	if !ok {
		return
	}
	f, err := rd.Row(r.Context(), r.PathValue("table"), id, p.Subject)
	var purged *archiveread.PurgedError
	switch {
	case errors.As(err, &purged):
		writeJSON(w, http.StatusGone, map[string]any{"error": "purged", "purged_at": purged.PurgedAt, "archive_id": purged.ArchiveID})
	case errors.Is(err, archiveread.ErrCorrupt):
		a.Logger.ErrorContext(r.Context(), "archive does not match its ledger hash; the row is not served", slog.Any("error", err))
		writeJSON(w, http.StatusConflict, corruptBody(err))
	case errors.Is(err, archiveread.ErrUnreadable):
		a.Logger.ErrorContext(r.Context(), "the store could not give an archive's bytes whole; the row is not served", slog.Any("error", err))
		writeJSON(w, http.StatusBadGateway, unreadableBody(err))
	case errors.Is(err, archiveread.ErrNotFound), errors.Is(err, archiveread.ErrUnknownTable):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case err != nil:
		a.fail(w, r, err)
	default:
		writeJSON(w, http.StatusOK, f)
	}
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

func (a *ArchiveAPI) run(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.disabled(w) {
		return
	}
	var req struct {
		Budget *int `json:"budget"`
	}
	if !decode(w, r, &req) {
		return
	}
	budget := archive.DefaultManualBudget
	if req.Budget != nil {
		budget = *req.Budget
	}
	if budget < 1 || budget > archive.MaxManualBudget {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("budget must be between 1 and %d", archive.MaxManualBudget), nil)
		return
	}
	rep, err := a.Engine.WithActor(p.Subject).RunPass(r.Context(), budget)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (a *ArchiveAPI) records(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	q := r.URL.Query()
	var f lifecycle.Filter
	var err error
	if t := q.Get("table"); t != "" {
		f.Table = &t
	}
	f.Held, err = boolParam(q.Get("held"), "held", err)
	f.Purgeable, err = boolParam(q.Get("purgeable"), "purgeable", err)
	if s := q.Get("limit"); s != "" && err == nil {
		if f.Limit, err = strconv.Atoi(s); err != nil || f.Limit < 1 {
			err = fmt.Errorf("limit %q: a number 1..%d", s, lifecycle.MaxRecordsLimit)
		}
	}
	if s := q.Get("after"); s != "" && err == nil {
		if f.After, err = uuid.Parse(s); err != nil {
			err = fmt.Errorf("after %q: an archive id", s)
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
		return
	}
	recs, err := a.Lifecycle.Records(r.Context(), f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": nonNilRecords(recs)})
}

func boolParam(s, name string, prev error) (*bool, error) {
	if s == "" || prev != nil {
		return nil, prev
	}
	v, err := strconv.ParseBool(s)
	if err != nil || (s != "true" && s != "false") {
		return nil, fmt.Errorf("%s %q: true or false", name, s)
	}
	return &v, nil
}

func nonNilRecords(r []lifecycle.Record) []lifecycle.Record {
	if r == nil {
		return []lifecycle.Record{}
	}
	return r
}

func (a *ArchiveAPI) retention(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, err := uuid.Parse(r.PathValue("archive_id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "archive_id: not a uuid", nil)
		return
	}
	var req struct {
		RetentionUntil string `json:"retention_until"`
	}
	if !decode(w, r, &req) {
		return
	}
	day, err := time.Parse(time.DateOnly, req.RetentionUntil)
	if err != nil || day.Year() < 2000 || day.Year() > 9999 {
		writeError(w, http.StatusBadRequest, "invalid_request", `retention_until must be a date "YYYY-MM-DD" (years 2000..9999)`, nil)
		return
	}
	if err := a.Lifecycle.SetRetention(r.Context(), id, day, p.Subject, p.Has(auth.ScopePurge)); err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"archive_id": id, "retention_until": day.Format(time.DateOnly)})
}

func (a *ArchiveAPI) placeHold(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	var req lifecycle.HoldRequest
	if !decode(w, r, &req) {
		return
	}
	for _, raw := range req.Subjects {
		if s, err := subject.Parse(raw); err == nil && !a.declared(w, s) {
			return // a malformed one is the lifecycle's 400
		}
	}
	h, err := a.Lifecycle.PlaceHold(r.Context(), req, p.Subject)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, h)
}

func (a *ArchiveAPI) releaseHold(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "id: not a uuid", nil)
		return
	}
	var req struct {
		Reason string `json:"reason"`
	}
	if !decode(w, r, &req) {
		return
	}
	h, err := a.Lifecycle.ReleaseHold(r.Context(), id, req.Reason, p.Subject)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (a *ArchiveAPI) holds(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	hs, err := a.Lifecycle.Holds(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if hs == nil {
		hs = []lifecycle.Hold{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"holds": hs})
}

func (a *ArchiveAPI) purge(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.disabled(w) {
		return
	}
	var req struct {
		Limit  *int `json:"limit"`
		DryRun bool `json:"dry_run"`
		// ArchiveIDs, when given, are exactly what is purged (what the
		// operator confirmed): 409 no_longer_purgeable, nothing destroyed,
		// if any of them is no longer due. Raw, to tell null from absent.
		ArchiveIDs json.RawMessage `json:"archive_ids"`
	}
	if !decode(w, r, &req) {
		return
	}
	var ids []uuid.UUID
	if req.ArchiveIDs != nil {
		if err := json.Unmarshal(req.ArchiveIDs, &ids); err != nil || ids == nil || req.Limit != nil || req.DryRun {
			writeError(w, http.StatusBadRequest, "invalid_request", "archive_ids is a list of archive ids, and goes without limit and dry_run", nil)
			return
		}
	}
	limit := lifecycle.DefaultPurgeLimit
	if req.Limit != nil {
		limit = *req.Limit
	}
	var res lifecycle.PurgeResult
	var err error
	switch {
	case ids != nil:
		res, err = a.Lifecycle.PurgeExactly(r.Context(), ids, p.Subject)
	default:
		res, err = a.Lifecycle.Purge(r.Context(), limit, req.DryRun, p.Subject)
	}
	if err != nil {
		a.purgeFailed(w, r, err)
		return
	}
	switch {
	case req.DryRun:
		writeJSON(w, http.StatusOK, map[string]any{"candidates": nonNilIDs(res.Candidates), "more": res.More})
	case res.Status == lifecycle.StatusAwaitingApproval:
		writeJSON(w, http.StatusOK, map[string]any{"purge_id": res.PurgeID, "candidates": nonNilIDs(res.Candidates), "status": res.Status, "more": res.More})
	default:
		body := map[string]any{"purged": nonNilIDs(res.Purged), "more": res.More, "purge_id": res.PurgeID, "certificate": res.Certificate}
		if len(res.Skipped) > 0 {
			body["skipped"] = res.Skipped // held or undue by the time their turn came
		}
		if len(res.Failed) > 0 {
			body["failed"] = res.Failed // left for the next purge; the log names each error
		}
		writeJSON(w, http.StatusOK, body)
	}
}

// purgeFailed answers a purge that failed: 409 no_longer_purgeable for a
// confirmed list (naming what was not purgeable, what was destroyed before
// it and what was not attempted), else as every lifecycle error.
func (a *ArchiveAPI) purgeFailed(w http.ResponseWriter, r *http.Request, err error) {
	var gone *lifecycle.NoLongerPurgeableError
	if !errors.As(err, &gone) {
		a.fail(w, r, err)
		return
	}
	body := map[string]any{"error": "no_longer_purgeable", "archive_ids": gone.IDs, "purged": nonNilIDs(gone.Purged),
		"message": "these confirmed archives are no longer purgeable; nothing after the first of them was destroyed; list the candidates again"}
	if len(gone.NotAttempted) > 0 {
		body["not_attempted"] = gone.NotAttempted
	}
	if gone.Certificate != "" {
		body["certificate"] = gone.Certificate
	}
	writeJSON(w, http.StatusConflict, body)
}

func (a *ArchiveAPI) approve(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.disabled(w) {
		return
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "id: not a uuid", nil)
		return
	}
	res, err := a.Lifecycle.Approve(r.Context(), id, p.Subject)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	body := map[string]any{"purge_id": id, "purged": nonNilIDs(res.Purged), "skipped": nonNilIDs(res.Skipped),
		"status": res.Status, "certificate": res.Certificate}
	if len(res.Failed) > 0 {
		body["failed"] = res.Failed
	}
	writeJSON(w, http.StatusOK, body)
}

// purgeView answers a purge with its frozen list (what an approval would
// destroy, each archive's table, records, range and retention date).
func (a *ArchiveAPI) purgeView(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "id: not a uuid", nil)
		return
	}
	v, err := a.Lifecycle.PurgeView(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func nonNilIDs(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return []uuid.UUID{}
	}
	return ids
}

// archiveAPI builds the archive API of an archiving service with a token
// key configured (nil otherwise: not served). Without a key, an archiving
// service refuses to serve on a non-loopback address.
func (r *runtime[T]) archiveAPI(lm *lifecycle.Manager, arch *archiver, reader *archiveReader, keys adminKeys) (*ArchiveAPI, error) {
	as, ok := r.archiveSettings()
	if !ok {
		return nil, nil
	}
	if keys.verifier == nil {
		if !settings.LoopbackAddr(r.tr.HTTPAddr) {
			return nil, fmt.Errorf("http_addr %s is not loopback and no archive API key is configured: set auth.jwt_public_key_file (%s), auth.jwks_file or auth.jwt_hs256_secret_file",
				r.tr.HTTPAddr, settings.EnvVar(r.spec.Name, "auth.jwt_public_key_file"))
		}
		return nil, nil
	}
	v, am := keys.verifier, keys.metrics
	r.logger.Info("archive API served", slog.Any("algorithms", v.Algorithms()), slog.Int("purge_approvals_required", as.Purge.ApprovalsRequired),
		slog.Bool("store_object_lock", arch.objectLock), slog.Bool("archiver_enabled", arch.engine != nil), slog.Bool("reads", reader.reader != nil))
	return &ArchiveAPI{Verifier: v, Metrics: am, Logger: r.logger, Lifecycle: lm, Engine: arch.engine, Journal: arch.journal,
		Knob: settings.EnvVar(r.spec.Name, "archive.enabled"), StoreKnob: settings.EnvVar(r.spec.Name, "archive.store.url"),
		Reader: reader.reader, VerifyMetrics: reader.metrics, SubjectKeyKnob: settings.EnvVar(r.spec.Name, "archive.subject_key_file")}, nil
}

// lifecycleManager builds an archiving service's lifecycle manager (nil
// for a service that does not archive), its purge metrics registered once.
func (r *runtime[T]) lifecycleManager(ctx context.Context, pool *pgxpool.Pool, arch *archiver, reg prometheus.Registerer) (*lifecycle.Manager, error) {
	as, ok := r.archiveSettings()
	if !ok {
		return nil, nil
	}
	pm, err := metrics.NewPurge(reg)
	if err != nil {
		return nil, err
	}
	tables := archiveTableNames(r.spec, r.cfg)
	pm.Known(tables, lifecycle.PurgeRefusals())
	key, err := r.subjectKey(ctx, pool, as)
	if err != nil {
		return nil, err
	}
	return lifecycle.New(pool, arch.store, lifecycle.Config{Service: r.spec.Name, ApprovalsRequired: as.Purge.ApprovalsRequired, ObjectLock: arch.objectLock, Tables: tables,
		SubjectKey: key, SubjectTables: subjectTableNames(archiveTables(r.spec, r.cfg)), Journal: arch.journal}, r.logger, pm)
}

// lockReconciler keeps the store's legal holds on the ledger's held
// archives: once at boot, then every verify interval (every
// DefaultLockReconcileInterval when scheduled verification is off). Nil
// when the bucket has no Object Lock.
func (r *runtime[T]) lockReconciler(lm *lifecycle.Manager, arch *archiver) func(context.Context) error {
	as, ok := r.archiveSettings()
	if !ok || lm == nil || !arch.objectLock {
		return nil
	}
	every := DefaultLockReconcileInterval
	if as.VerifyIntervalHours > 0 {
		every = time.Duration(as.VerifyIntervalHours) * time.Hour
	}
	return func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if err := arch.journal.Err(); err != nil { // a restore forgot holds: no lock is touched until reconciled
				r.logger.WarnContext(ctx, "store-lock reconciliation skipped: "+RestoredBehindJournal, slog.Any("error", err))
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
					continue
				}
			}
			rep, err := lm.ReconcileLocks(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				r.logger.ErrorContext(ctx, "store-lock reconciliation failed; retried next interval", slog.Any("error", err))
			case rep.Drift > 0 || rep.Missing > 0:
				r.logger.WarnContext(ctx, "store-lock reconciliation found held archives the store did not lock", slog.Int("held", rep.Held),
					slog.Int("drift", rep.Drift), slog.Int("locked", rep.Locked), slog.Int("missing", rep.Missing))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
}

// DefaultLedgerWatchInterval is how often serve counts its ledger's
// archives per state (archive_ledger_archives): one grouped read of a
// table of one row per archive, so a hold, a date or a purge shows on the
// dashboard within a minute.
const DefaultLedgerWatchInterval = time.Minute

// ledgerWatch is serve's ledger counter (nil when the archiver is off):
// every DefaultLedgerWatchInterval it exports each archived table's
// archives per lifecycle state.
func (r *runtime[T]) ledgerWatch(lm *lifecycle.Manager, reg prometheus.Registerer) (func(context.Context) error, error) {
	if lm == nil {
		return nil, nil
	}
	m, err := metrics.NewLedger(reg)
	if err != nil {
		return nil, err
	}
	m.Known(archiveTableNames(r.spec, r.cfg), lifecycle.States())
	return func(ctx context.Context) error {
		t := time.NewTicker(DefaultLedgerWatchInterval)
		defer t.Stop()
		for {
			states, err := lm.LedgerStates(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				r.logger.WarnContext(ctx, "could not count the ledger's archives; retried next interval", slog.Any("error", err))
			default:
				for table, byState := range states {
					for state, n := range byState {
						m.Archives.WithLabelValues(table, state).Set(float64(n))
					}
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}, nil
}

// DefaultLockReconcileInterval is how often the store's legal holds are
// reconciled with the ledger when scheduled verification is off: hourly,
// so a hold the store missed is enforced within the hour.
const DefaultLockReconcileInterval = time.Hour

// archiveReader is an archiving service's reader of its archives (nil
// when the archiver is disabled) and the verification metrics.
type archiveReader struct {
	reader  *archiveread.Reader
	metrics *metrics.Verify
}

// archiveReader builds the reader and, with archive.verify_interval_hours,
// the scheduled verifier (nil: none).
func (r *runtime[T]) archiveReader(ctx context.Context, pool *pgxpool.Pool, arch *archiver, reg prometheus.Registerer) (*archiveReader, func(context.Context) error, error) {
	as, ok := r.archiveSettings()
	if !ok {
		return &archiveReader{}, nil, nil
	}
	vm, err := metrics.NewVerify(reg)
	if err != nil {
		return nil, nil, err
	}
	vm.Known(archiveread.Kinds())
	out := &archiveReader{metrics: vm}
	// Without a scheduled verifier (no store, or verify_interval_hours 0)
	// no "last verify" is exported: its 0 would read "never verified" and
	// fire ArchiveVerifyStale for a verification nobody asked for.
	unscheduled := func() { reg.Unregister(vm.Last) }
	if arch.store == nil {
		unscheduled()
		return out, nil, nil
	}
	key, err := r.subjectKey(ctx, pool, as)
	if err != nil {
		return nil, nil, err
	}
	out.reader = archiveread.New(pool, arch.store, r.spec.Name, archiveTables(r.spec, r.cfg)).WithSubjectKey(key)
	if as.VerifyIntervalHours == 0 {
		unscheduled()
		return out, nil, nil
	}
	every := time.Duration(as.VerifyIntervalHours) * time.Hour
	return out, func(ctx context.Context) error {
		out.reader.RunVerifier(ctx, every, vm, r.logger)
		return nil
	}, nil
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
