package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/metrics"
)

// DueIndexLimit is how many archives a due listing indexes by case before
// it answers (ADR-073): each is read from the store once, ever, so a
// listing after a large backlog of archives answers in seconds and says
// how many are left (their cases are not listed until they are indexed).
const DueIndexLimit = 200

// maxDueAhead bounds a listing's as_of: a preview of what falls due in the
// next hundred years is a plan; further is a typo.
const maxDueAhead = 100 * 366 * 24 * time.Hour

// dispositionRoutes registers the disposition review API.
func (a *ArchiveAPI) dispositionRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/dispositions/due", a.require(auth.ScopeReview, a.withDispositions(a.due)))
	mux.Handle("POST /admin/dispositions", a.require(auth.ScopeReview, a.withDispositions(a.freeze)))
	mux.Handle("GET /admin/dispositions/{id}", a.require(auth.ScopeReview, a.withDispositions(a.batch)))
	mux.Handle("POST /admin/dispositions/{id}/reject", a.require(auth.ScopeReview, a.withDispositions(a.reject)))
	mux.Handle("POST /admin/dispositions/{id}/approve", a.require(auth.ScopeReview, a.withDispositions(a.approveBatch)))
	mux.Handle("GET /admin/dispositions/{id}/certificate", a.require(auth.ScopeReview, a.withDispositions(a.batchCertificate)))
}

// batchCertificate answers an executed batch's certificate as the store
// holds it: GET /admin/dispositions/{id}/certificate. 200; 404 (no such
// batch, or not executed).
func (a *ArchiveAPI) batchCertificate(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "the batch id is a UUID", nil)
		return
	}
	doc, err := a.Dispositions.Certificate(r.Context(), id)
	if err != nil {
		a.dispositionError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc)
}

// approveBatch executes a proposed batch as a second identity: POST
// /admin/dispositions/{id}/approve {}. 200 {"disposition_id", "status",
// "rows_destroyed", "archives_rewritten", "archives_purged",
// "cases_destroyed", "cases_skipped", "certificate_key"} (an executed
// batch answers its outcome again); 403 self_approval; 404; 409
// not_awaiting_decision, schedule_changed, already_running; 503
// store_not_configured, orphan_uploads_left;
// a failure part way answers 5xx and the next call finishes the batch.
func (a *ArchiveAPI) approveBatch(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "the batch id is a UUID", nil)
		return
	}
	var none struct{}
	if !decode(w, r, &none) {
		return
	}
	res, err := a.Dispositions.Approve(r.Context(), id, p.Subject)
	if err != nil {
		a.dispositionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// IndexAllCaseRows indexes by case every archive not yet indexed, in
// rounds of DueIndexLimit, until none is left or a round indexes nothing
// (those left failed: their cases are not due).
func IndexAllCaseRows(reader *archiveread.Reader) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		for {
			rep, err := reader.IndexCaseRows(ctx, DueIndexLimit)
			if err != nil || rep.Left == 0 || rep.Indexed == 0 {
				return rep.Left, err
			}
		}
	}
}

// freeze records a batch of what is due today: POST /admin/dispositions
// {"limit"?: rows}. 201 the batch (its cases by subject, for the
// reviewers, and "held": the due cases a hold kept out); 409
// nothing_due, no_schedule_in_force or schedule_changed; 400 a bad limit.
func (a *ArchiveAPI) freeze(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	var body struct {
		Limit *int64 `json:"limit"`
	}
	if !decode(w, r, &body) {
		return
	}
	var limit int64
	if body.Limit != nil {
		if *body.Limit <= 0 {
			writeError(w, http.StatusBadRequest, "invalid_request", "limit must be a positive number of rows", nil)
			return
		}
		limit = *body.Limit
	}
	if _, err := DueNow(r.Context(), a.Reader, a.Dispositions, a.DispositionMetrics, time.Now()); err != nil {
		a.dispositionError(w, r, err)
		return
	}
	b, err := a.Dispositions.Freeze(r.Context(), limit, p.Subject)
	if err != nil {
		a.dispositionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, b)
}

// batch shows a batch: GET /admin/dispositions/{id}. 200; 404.
func (a *ArchiveAPI) batch(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "the batch id is a UUID", nil)
		return
	}
	b, err := a.Dispositions.Get(r.Context(), id)
	if err != nil {
		a.dispositionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// reject returns a proposed batch to the schedule: POST
// /admin/dispositions/{id}/reject {"reason", "extend_until"?:
// "YYYY-MM-DD"}; with extend_until every case of the batch is kept until
// that day. 200 the batch; 404; 409 not_awaiting_decision; 400.
func (a *ArchiveAPI) reject(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "the batch id is a UUID", nil)
		return
	}
	var body struct {
		Reason      string  `json:"reason"`
		ExtendUntil *string `json:"extend_until"`
	}
	if !decode(w, r, &body) {
		return
	}
	if err := courtorder.CheckText("reason", body.Reason, courtorder.MaxReason); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
		return
	}
	var until *time.Time
	if body.ExtendUntil != nil {
		d, err := time.Parse(time.DateOnly, *body.ExtendUntil)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "extend_until must be a date (YYYY-MM-DD)", nil)
			return
		}
		until = &d
	}
	b, err := a.Dispositions.Reject(r.Context(), id, p.Subject, body.Reason, until)
	if err != nil {
		a.dispositionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// dispositionError maps a disposition refusal to its answer.
func (a *ArchiveAPI) dispositionError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, disposition.ErrNoSchedule):
		writeError(w, http.StatusConflict, "no_schedule_in_force", err.Error(), nil)
	case errors.Is(err, disposition.ErrNothingDue):
		writeError(w, http.StatusConflict, "nothing_due", err.Error(), nil)
	case errors.Is(err, disposition.ErrScheduleChanged):
		writeError(w, http.StatusConflict, "schedule_changed", err.Error(), nil)
	case errors.Is(err, disposition.ErrNotAwaiting):
		writeError(w, http.StatusConflict, "not_awaiting_decision", err.Error(), nil)
	case errors.Is(err, disposition.ErrNotFound), errors.Is(err, disposition.ErrNoCertificate):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case errors.Is(err, disposition.ErrSelfApproval):
		writeError(w, http.StatusForbidden, "self_approval", err.Error(), nil)
	case errors.Is(err, disposition.ErrBusy):
		writeJSON(w, http.StatusConflict, map[string]string{"error": "already_running"})
	case errors.Is(err, courtorder.ErrOrphans):
		writeError(w, http.StatusServiceUnavailable, "orphan_uploads_left", err.Error(), nil)
	case errors.Is(err, archiveread.ErrCorrupt):
		writeJSON(w, http.StatusConflict, corruptBody(err))
	case errors.Is(err, disposition.ErrNoExecution):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "store_not_configured", "knob": a.StoreKnob})
	case errors.Is(err, disposition.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
	case errors.Is(err, archiveread.ErrNoSubjectKey):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "subject_key_not_configured", "knob": a.SubjectKeyKnob})
	default:
		a.fail(w, r, err)
	}
}

// withDispositions answers 503 schedule_not_configured when the API
// computes no due dates (no store or no subject key).
func (a *ArchiveAPI) withDispositions(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p auth.Principal) {
		if a.Dispositions == nil || a.Reader == nil {
			writeError(w, http.StatusServiceUnavailable, "schedule_not_configured", "this API computes no due dates: it needs the store and the subject key", nil)
			return
		}
		next(w, r, p)
	}
}

// due lists what the schedule in force makes due, by item: GET
// /admin/dispositions/due[?as_of=YYYY-MM-DD]. It first indexes up to
// DueIndexLimit archives by case. 200 {"version", "as_of",
// "unindexed_archives", "items": [{"item", "series", "authority",
// "action", "retain", "rows", "cases": [{"subject", "subject_hash",
// "series", "due", "rows_hot", "rows_archived", "archives", "holds"}]}]};
// 409 no_schedule_in_force.
func (a *ArchiveAPI) due(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	asOf := time.Now().UTC()
	if v := r.URL.Query().Get("as_of"); v != "" {
		d, err := time.Parse(time.DateOnly, v)
		if err != nil || d.Before(asOf.Add(-maxDueAhead)) || d.After(asOf.Add(maxDueAhead)) {
			writeError(w, http.StatusBadRequest, "invalid_request", "as_of must be a date (YYYY-MM-DD) within a hundred years of today", nil)
			return
		}
		asOf = d
	}
	due, err := DueNow(r.Context(), a.Reader, a.Dispositions, a.DispositionMetrics, asOf)
	if err != nil {
		a.dispositionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, due)
}

// DueNow indexes up to DueIndexLimit archives by case, then lists what is
// due on asOf; the gauges (m, may be nil) are set from a listing of today.
func DueNow(ctx context.Context, reader *archiveread.Reader, f *disposition.Finder, m *metrics.Dispositions, asOf time.Time) (disposition.Due, error) {
	rep, err := reader.IndexCaseRows(ctx, DueIndexLimit)
	if err != nil {
		return disposition.Due{}, err
	}
	due, err := f.Find(ctx, asOf, rep.Left)
	if err != nil {
		return due, err
	}
	if today := time.Now().UTC(); m != nil && asOf.UTC().Format(time.DateOnly) == today.Format(time.DateOnly) {
		m.DueRows.Reset()
		m.DueOldestDays.Reset()
		for _, it := range due.Items {
			m.DueRows.WithLabelValues(it.Series, it.Item).Set(float64(it.Rows))
			oldest := -1.0
			for _, c := range it.Cases {
				d, err := time.Parse(time.DateOnly, c.Due)
				if err != nil || len(c.Holds) > 0 {
					continue // a held case waits for its hold, not for the review
				}
				oldest = max(oldest, float64(int(today.Sub(d).Hours())/24))
			}
			if oldest >= 0 {
				m.DueOldestDays.WithLabelValues(it.Series, it.Item).Set(oldest)
			}
		}
	}
	return due, nil
}

// DueInterval is how often serve recomputes what is due for the gauges: a
// due date is a day, so hourly shows a new day's rows within the hour.
const DueInterval = time.Hour

// dueWatch recomputes what is due every DueInterval (nil: the API
// computes no due dates). Until a schedule is in force nothing is due and
// nothing is logged.
func (r *runtime[T]) dueWatch(api *ArchiveAPI) func(context.Context) error {
	if api == nil || api.Dispositions == nil || api.Reader == nil {
		return nil
	}
	return func(ctx context.Context) error {
		for {
			_, err := DueNow(ctx, api.Reader, api.Dispositions, api.DispositionMetrics, time.Now())
			if err != nil && ctx.Err() == nil && !errors.Is(err, disposition.ErrNoSchedule) {
				r.logger.ErrorContext(ctx, "what is due could not be computed; retried next interval", slog.Any("error", err))
			}
			if err == nil {
				if n, err := api.Dispositions.DateArchives(ctx); err != nil && ctx.Err() == nil {
					r.logger.ErrorContext(ctx, "the archives could not be dated by the schedule; retried next interval", slog.Any("error", err))
				} else if n > 0 {
					r.logger.InfoContext(ctx, "archives dated by the records schedule", slog.Int64("archives", n))
				}
			}
			if err == nil && r.records().AutoDestroy {
				r.autoDestroy(ctx, api.Dispositions)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(DueInterval):
			}
		}
	}
}

// records are the service's records schedule settings (the defaults when
// its spec declares none).
func (r *runtime[T]) records() disposition.Settings {
	if r.spec.Archive == nil || r.spec.Archive.Records == nil {
		return disposition.Settings{}
	}
	return r.spec.Archive.Records(r.cfg)
}

// autoDestroy executes what destroy items make due (records.auto_destroy),
// logging what it did; a failure is retried at the next interval.
func (r *runtime[T]) autoDestroy(ctx context.Context, f *disposition.Finder) {
	res, err := f.AutoDestroy(ctx)
	switch {
	case err != nil && ctx.Err() == nil && !errors.Is(err, disposition.ErrBusy) && !errors.Is(err, disposition.ErrScheduleChanged):
		r.logger.ErrorContext(ctx, "the scheduled disposition failed; the next interval finishes it", slog.Any("error", err))
	case err == nil && res.DispositionID != uuid.Nil:
		r.logger.InfoContext(ctx, "scheduled disposition executed", slog.String("disposition_id", res.DispositionID.String()),
			slog.Int64("rows_destroyed", res.RowsDestroyed), slog.Int("cases_skipped", res.CasesSkipped), slog.String("certificate", res.CertificateKey))
	}
}
