package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
)

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
