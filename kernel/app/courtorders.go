package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OrderRefHeader names the court order that allows a sealed-access read
// (with the archive:sealed-read scope).
const OrderRefHeader = "X-Craig-Order-Ref"

// courtOrderRoutes registers the court-order API (ADR-067).
func (a *ArchiveAPI) courtOrderRoutes(mux *http.ServeMux) {
	mux.Handle("POST /admin/subjects/{subject}/seal", a.require(auth.ScopeSeal, a.seal))
	mux.Handle("POST /admin/subjects/{subject}/unseal", a.require(auth.ScopeSeal, a.unseal))
	mux.Handle("POST /admin/subjects/{subject}/expunge", a.require(auth.ScopePurge, a.expunge))
	mux.Handle("POST /admin/subjects/expungements/{expunge_id}/approve", a.require(auth.ScopePurge, a.approveExpunge))
	mux.Handle("GET /admin/subjects/orders", a.require(auth.ScopeRead, a.orders))
}

// reader is the reader a read request gets: with archive:sealed-read and
// an order reference, one that sees sealed subjects (and announces the
// order); otherwise the default, which answers for a sealed subject's rows
// as for rows that do not exist. A malformed reference is 400 (false).
func (a *ArchiveAPI) reader(w http.ResponseWriter, r *http.Request, p auth.Principal) (*archiveread.Reader, bool) {
	ref := r.Header.Get(OrderRefHeader)
	if ref == "" || !p.Has(auth.ScopeSealedRead) {
		return a.Reader, true
	}
	if err := courtorder.CheckText(OrderRefHeader, ref, courtorder.MaxOrderRef); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
		return nil, false
	}
	return a.Reader.WithSealedAccess(ref), true
}

// declared answers 400 subject_kind_not_declared (false) when no table of
// the service declares subjects of s's kind: an order, a hold or a read
// of it could never reach a row, and must not answer as if it had.
func (a *ArchiveAPI) declared(w http.ResponseWriter, s subject.Subject) bool {
	if a.Reader == nil || a.Reader.DeclaresKind(s.Kind()) {
		return true
	}
	writeError(w, http.StatusBadRequest, "subject_kind_not_declared",
		"no table of this service declares "+string(s.Kind())+" subjects: nothing here is about one", nil)
	return false
}

// orderBody is a seal, unseal or expunge request.
type orderBody struct {
	OrderRef string      `json:"order_ref"`
	Reason   string      `json:"reason"`
	Holds    []uuid.UUID `json:"holds"`
}

// orderRequest reads a court-order call's subject and body; false when it
// answered (400, 503).
func (a *ArchiveAPI) orderRequest(w http.ResponseWriter, r *http.Request, holds bool) (subject.Subject, orderBody, bool) {
	var body orderBody
	if a.Orders == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "store_not_configured", "knob": a.StoreKnob})
		return subject.Subject{}, body, false
	}
	s, err := subject.Parse(r.PathValue("subject"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "subject: "+err.Error(), nil)
		return s, body, false
	}
	if !a.declared(w, s) {
		return s, body, false
	}
	if !decode(w, r, &body) {
		return s, body, false
	}
	if !holds && body.Holds != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "holds: only an expungement names holds", nil)
		return s, body, false
	}
	return s, body, true
}

func (a *ArchiveAPI) seal(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	a.sealOrUnseal(w, r, p, a.Orders.Seal)
}

func (a *ArchiveAPI) unseal(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	a.sealOrUnseal(w, r, p, a.Orders.Unseal)
}

type sealFunc func(ctx context.Context, s subject.Subject, orderRef, reason, actor string) (courtorder.SealResult, error)

func (a *ArchiveAPI) sealOrUnseal(w http.ResponseWriter, r *http.Request, p auth.Principal, fn sealFunc) {
	s, body, ok := a.orderRequest(w, r, false)
	if !ok {
		return
	}
	res, err := fn(r.Context(), s, body.OrderRef, body.Reason, p.Subject)
	if err != nil {
		a.orderFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (a *ArchiveAPI) expunge(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	s, body, ok := a.orderRequest(w, r, true)
	if !ok {
		return
	}
	res, err := a.Orders.RequestExpunge(r.Context(), s, body.OrderRef, body.Reason, body.Holds, p.Subject)
	if err != nil {
		a.orderFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, res)
}

func (a *ArchiveAPI) approveExpunge(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.Orders == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "store_not_configured", "knob": a.StoreKnob})
		return
	}
	id, err := uuid.Parse(r.PathValue("expunge_id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "expunge_id: not a uuid", nil)
		return
	}
	var none struct{}
	if !decode(w, r, &none) {
		return
	}
	res, err := a.Orders.Approve(r.Context(), id, p.Subject)
	if err != nil {
		a.orderFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (a *ArchiveAPI) orders(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	if a.Orders == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "store_not_configured", "knob": a.StoreKnob})
		return
	}
	l, err := a.Orders.List(r.Context())
	if err != nil {
		a.orderFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// orderFail maps a court-order error to its answer; nothing it logs names
// the subject (the route pattern, never the path).
func (a *ArchiveAPI) orderFail(w http.ResponseWriter, r *http.Request, err error) {
	var held *courtorder.HeldError
	var pending *courtorder.PendingError
	switch {
	case errors.As(err, &held):
		writeJSON(w, http.StatusConflict, map[string]any{"error": "held", "archives": held.Archives, "holds": held.Holds,
			"message": "an archive holding the subject is under a legal hold the order does not name; nothing was changed"})
	case errors.As(err, &pending):
		writeJSON(w, http.StatusConflict, map[string]any{"error": "already_requested", "expunge_id": pending.ExpungeID,
			"message": "an expungement of the subject is already requested: approve it"})
	case errors.Is(err, courtorder.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
	case errors.Is(err, courtorder.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case errors.Is(err, courtorder.ErrSelfApproval):
		writeError(w, http.StatusForbidden, "self_approval", err.Error(), nil)
	case errors.Is(err, courtorder.ErrAlreadyRunning):
		writeJSON(w, http.StatusConflict, map[string]string{"error": "already_running"})
	case errors.Is(err, courtorder.ErrNotIndexed):
		writeError(w, http.StatusConflict, "subjects_not_indexed", err.Error(), nil)
	case errors.Is(err, journal.ErrBehind), errors.Is(err, journal.ErrDiverged), errors.Is(err, journal.ErrNotStored), errors.Is(err, journal.ErrUnchecked):
		a.fail(w, r, err)
	case errors.Is(err, courtorder.ErrOrphans):
		writeError(w, http.StatusServiceUnavailable, "orphan_uploads_left", err.Error(), nil)
	case errors.Is(err, courtorder.ErrNoSubjectKey):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "subject_key_not_configured", "knob": a.SubjectKeyKnob})
	case errors.Is(err, courtorder.ErrNoStore):
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "store_not_configured", "knob": a.StoreKnob})
	case errors.Is(err, archiveread.ErrCorrupt):
		writeJSON(w, http.StatusConflict, corruptBody(err))
	case errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, "cancelled", "the request was cancelled", nil)
	default:
		a.Logger.ErrorContext(r.Context(), "court order call failed; the next call resumes it", slog.String("route", route(r)), slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "internal", "the call failed; see the service log", nil)
	}
}

// courtOrders builds the service's court orders (nil without a store: the
// calls answer 503 store_not_configured).
func (r *runtime[T]) courtOrders(ctx context.Context, pool *pgxpool.Pool, arch *archiver) (*courtorder.Orders, error) {
	as, ok := r.archiveSettings()
	if !ok || arch.store == nil {
		return nil, nil
	}
	key, err := r.subjectKey(ctx, pool, as)
	if err != nil {
		return nil, err
	}
	return courtorder.New(pool, arch.store, courtorder.Config{Service: r.spec.Name, Tables: archiveTables(r.spec, r.cfg), Key: key,
		ObjectLock: arch.objectLock, Bookkeep: r.scheduled(r.spec.Archive.Bookkeeper.Bookkeep), Orphans: arch.orphans(), Journal: arch.journal}, r.logger)
}
