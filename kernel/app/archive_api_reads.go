package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/google/uuid"
)

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
