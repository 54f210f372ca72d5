package app

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
)

// scheduleRoutes registers the records schedule API (ADR-073).
func (a *ArchiveAPI) scheduleRoutes(mux *http.ServeMux) {
	mux.Handle("POST /admin/retention/schedule", a.require(auth.ScopeSchedule, a.withSchedules(a.proposeSchedule)))
	mux.Handle("POST /admin/retention/schedule/{version}/approve", a.require(auth.ScopeSchedule, a.withSchedules(a.approveSchedule)))
	mux.Handle("GET /admin/retention/schedule", a.require(auth.ScopeRead, a.withSchedules(a.showSchedule)))
	mux.Handle("POST /admin/subjects/{subject}/events", a.require(auth.ScopeEvents, a.caseEvent))
}

// caseEvent records a case event by hand (a correction): body {"type":
// "case.closed" | "case.reopened" | "case.merged", "at": RFC 3339,
// "classification"?, "into"?: "case:<n>"}; 200 the clock as the event left
// it; 400 a malformed event; 409 stale_event (older than the clock's last
// change: nothing changed).
func (a *ArchiveAPI) caseEvent(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.Clocks == nil {
		writeError(w, http.StatusServiceUnavailable, "schedule_not_configured", "this API keeps no case clocks", nil)
		return
	}
	s, err := subject.Parse(r.PathValue("subject"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "subject: "+err.Error(), nil)
		return
	}
	var body struct {
		Type           string  `json:"type"`
		At             string  `json:"at"`
		Classification *string `json:"classification"`
		Into           *string `json:"into"`
	}
	if !decode(w, r, &body) {
		return
	}
	e := schedule.Event{Type: body.Type, Case: s}
	if e.At, err = time.Parse(time.RFC3339Nano, body.At); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", `at must be an RFC 3339 time ("2026-03-01T00:00:00Z")`, nil)
		return
	}
	if body.Classification != nil {
		e.Classification = *body.Classification
	}
	if body.Into != nil {
		if e.Into, err = subject.Parse(*body.Into); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "into: "+err.Error(), nil)
			return
		}
	}
	clock, err := a.Clocks.Apply(r.Context(), e, p.Subject)
	switch {
	case errors.Is(err, schedule.ErrStale):
		a.countCaseEvent(e.Type, metrics.CaseEventStale)
		writeError(w, http.StatusConflict, "stale_event", err.Error(), nil)
	case errors.Is(err, schedule.ErrBadEvent):
		a.countCaseEvent(e.Type, metrics.CaseEventMalformed)
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
	case errors.Is(err, schedule.ErrNoKey):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "subject_key_not_configured", "knob": a.SubjectKeyKnob})
	case err != nil:
		a.fail(w, r, err)
	default:
		a.countCaseEvent(e.Type, metrics.CaseEventApplied)
		writeJSON(w, http.StatusOK, clock)
	}
}

// countCaseEvent counts an event typed by hand; an unknown type is not a
// series (a typo must not create one).
func (a *ArchiveAPI) countCaseEvent(eventType, outcome string) {
	if a.CaseEvents != nil && schedule.IsCaseEvent(eventType) {
		a.CaseEvents.Received.WithLabelValues(eventType, "api", outcome).Inc()
	}
}

// withSchedules answers 503 schedule_not_configured when the API has no
// schedules (an API built without a database).
func (a *ArchiveAPI) withSchedules(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p auth.Principal) {
		if a.Schedules == nil {
			writeError(w, http.StatusServiceUnavailable, "schedule_not_configured", "this API serves no records schedule", nil)
			return
		}
		next(w, r, p)
	}
}

// scheduleSeries are what the schedule knows of the service's archived
// tables: their names and archive.retention.<table>_days.
func scheduleSeries(tables []archive.TableSpec) []schedule.Series {
	out := make([]schedule.Series, len(tables))
	for i, t := range tables {
		out[i] = schedule.Series{Table: t.Table, RetentionDays: t.RetentionDays}
	}
	return out
}

// proposeSchedule records the body (a schedule document, YAML or JSON) as
// a proposed version: 201 {"version", "status": "proposed", "nearer",
// "nearer_series"}; 400 naming each item and field that is wrong; 409 for
// a version that exists.
func (a *ArchiveAPI) proposeSchedule(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, schedule.MaxDocument))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body exceeds %d bytes", schedule.MaxDocument), nil)
		return
	}
	doc, err := schedule.Parse(raw, a.Schedules.Series())
	if err == nil {
		var out schedule.Proposed
		if out, err = a.Schedules.Propose(r.Context(), doc, p.Subject); err == nil {
			writeJSON(w, http.StatusCreated, out)
			return
		}
	}
	a.scheduleFail(w, r, err)
}

// approveSchedule puts a proposed version in force: 200 with the version;
// 403 self_approval for its proposer, insufficient_scope (archive:purge)
// for a version that brings destruction nearer; 404; 409 once approved.
func (a *ArchiveAPI) approveSchedule(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if !decode(w, r, &struct{}{}) {
		return
	}
	v, err := a.Schedules.Approve(r.Context(), r.PathValue("version"), p.Subject, p.Has(auth.ScopePurge))
	if err != nil {
		a.scheduleFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// scheduleView is the schedule's state: the version in force (null while
// none is approved: then settings holds, the per-table days), and every
// version.
type scheduleView struct {
	// Series are the service's archived tables: what its items name.
	Series   []string           `json:"series"`
	InForce  *schedule.Version  `json:"in_force"`
	Settings *schedule.Document `json:"settings"`
	History  []schedule.Version `json:"history"`
}

func (a *ArchiveAPI) showSchedule(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	var v scheduleView
	for _, s := range a.Schedules.Series() {
		v.Series = append(v.Series, s.Table)
	}
	var err error
	if v.InForce, err = a.Schedules.InForce(r.Context()); err == nil {
		v.History, err = a.Schedules.History(r.Context())
	}
	if err != nil {
		a.scheduleFail(w, r, err)
		return
	}
	if v.InForce == nil {
		d := schedule.Implicit(a.Schedules.Series())
		v.Settings = &d
	}
	writeJSON(w, http.StatusOK, v)
}

// scheduleFail maps a schedule error to its answer.
func (a *ArchiveAPI) scheduleFail(w http.ResponseWriter, r *http.Request, err error) {
	var inv *schedule.InvalidError
	switch {
	case errors.As(err, &inv):
		writeError(w, http.StatusBadRequest, "invalid_schedule", inv.Error(), map[string]any{"problems": inv.Problems})
	case errors.Is(err, schedule.ErrExists):
		writeError(w, http.StatusConflict, "version_exists", err.Error(), nil)
	case errors.Is(err, schedule.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case errors.Is(err, schedule.ErrNotAwaiting):
		writeError(w, http.StatusConflict, "not_awaiting_approval", err.Error(), nil)
	case errors.Is(err, schedule.ErrSelfApproval):
		writeError(w, http.StatusForbidden, "self_approval", err.Error(), nil)
	case errors.Is(err, schedule.ErrNearer):
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope", "required": auth.ScopePurge, "message": err.Error()})
	default:
		a.fail(w, r, err)
	}
}
