package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
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
	switch {
	case errors.Is(err, disposition.ErrNoSchedule):
		writeError(w, http.StatusConflict, "no_schedule_in_force", err.Error(), nil)
	case errors.Is(err, archiveread.ErrNoSubjectKey):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "subject_key_not_configured", "knob": a.SubjectKeyKnob})
	case err != nil:
		a.fail(w, r, err)
	default:
		writeJSON(w, http.StatusOK, due)
	}
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
	if m != nil && asOf.UTC().Format(time.DateOnly) == time.Now().UTC().Format(time.DateOnly) {
		m.DueRows.Reset()
		for _, it := range due.Items {
			m.DueRows.WithLabelValues(it.Series, it.Item).Set(float64(it.Rows))
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
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(DueInterval):
			}
		}
	}
}
