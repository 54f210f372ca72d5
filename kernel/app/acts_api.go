package app

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/lifecycle"
)

// actsRoutes registers the listings of the acts that destroy records and
// their certificates (ADR-074): what the records officer's console shows
// for approval and as proof.
func (a *ArchiveAPI) actsRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/archive/purges", a.require(auth.ScopeRead, a.purgeList))
	mux.Handle("GET /admin/archive/certificates", a.require(auth.ScopeRead, a.certificates))
	mux.Handle("GET /admin/archive/certificates/{kind}/{id}", a.require(auth.ScopeRead, a.certificate))
	mux.Handle("GET /admin/archive/certificates/{kind}/{id}/object", a.require(auth.ScopeRead, a.certificateObject))
	mux.Handle("GET /admin/dispositions", a.require(auth.ScopeReview, a.withDispositions(a.dispositionList)))
}

// purgeList answers GET /admin/archive/purges[?status=awaiting_approval|executed]:
// 200 {"purges": [{"purge_id", "status", "candidates", "requested_by",
// "requested_at", "approved_by", "executed_at", "purged", "certificate_key"}]},
// newest first, at most lifecycle.MaxListed.
func (a *ArchiveAPI) purgeList(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	ps, err := a.Lifecycle.ListPurges(r.Context(), r.URL.Query().Get("status"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"purges": ps})
}

// certificates answers GET /admin/archive/certificates: 200 {"certificates":
// [{"kind": "purge"|"expungement"|"disposition", "id", "certificate_key",
// "executed_at", "requested_by", "approved_by"}]}, newest first.
func (a *ArchiveAPI) certificates(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	cs, err := a.Lifecycle.ListCertificates(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"certificates": cs})
}

// certificate answers GET /admin/archive/certificates/{kind}/{id}: the
// certificate as the store holds it, verified against the store: 200
// {…summary, "certificate", "sha256", "verification": {"ok", "checked_at",
// "names_act", "archives_destroyed", "objects_gone", "remaining"}}; 404; 503
// store_not_configured.
func (a *ArchiveAPI) certificate(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	kind, id, ok := a.certificatePath(w, r)
	if !ok {
		return
	}
	c, err := a.Lifecycle.Certificate(r.Context(), kind, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// dispositionList answers GET /admin/dispositions[?status=…]: 200
// {"dispositions": [{"disposition_id", "status", "schedule_version",
// "as_of", "rows", "proposed_by", "proposed_at", "approved_by",
// "executed_at", "rejected_by", "rejected_at", "certificate_key"}]}.
func (a *ArchiveAPI) dispositionList(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	ds, err := a.Dispositions.List(r.Context(), r.URL.Query().Get("status"))
	if err != nil {
		a.dispositionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dispositions": ds})
}

// certificatePath reads /{kind}/{id}: 400 for anything else, 503 without
// a store.
func (a *ArchiveAPI) certificatePath(w http.ResponseWriter, r *http.Request) (string, uuid.UUID, bool) {
	kind := r.PathValue("kind")
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil || (kind != lifecycle.KindPurge && kind != lifecycle.KindExpungement && kind != lifecycle.KindDisposition) {
		writeError(w, http.StatusBadRequest, "invalid_request", "a certificate is /{purge|expungement|disposition}/{uuid}", nil)
		return "", uuid.Nil, false
	}
	return kind, id, !a.unreadable(w)
}

// certificateObject answers GET /admin/archive/certificates/{kind}/{id}/object:
// the certificate's bytes exactly as the store holds them (their sha256 is
// the one the verification answers).
func (a *ArchiveAPI) certificateObject(w http.ResponseWriter, r *http.Request, _ auth.Principal) {
	kind, id, ok := a.certificatePath(w, r)
	if !ok {
		return
	}
	_, body, err := a.Lifecycle.CertificateObject(r.Context(), kind, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
