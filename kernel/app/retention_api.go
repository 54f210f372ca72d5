package app

import (
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/prometheus/client_golang/prometheus"
)

// Retention is a service's effective windows, served at GET
// /admin/retention: what `craigctl fleet check` compares across services,
// since no single service can see its consumers' inbox windows.
type Retention struct {
	Service string `json:"service"`
	// EventOutboxRetentionDays: published outbox rows older than this are
	// swept (0: never).
	EventOutboxRetentionDays int `json:"event_outbox_retention_days"`
	// EventInboxRetentionDays: inbox dedup records older than this are
	// swept (0: never).
	EventInboxRetentionDays int `json:"event_inbox_retention_days"`
	// ReplayMaxAgeDays is the oldest an admin replay may reach.
	ReplayMaxAgeDays int `json:"replay_max_age_days"`
	// Tables is every swept table's window in days (0: its sweep is off).
	Tables map[string]int `json:"tables"`
	// Archive is the archiver's windows (absent for a service that archives
	// nothing).
	Archive *ArchiveRetention `json:"archive,omitempty"`
}

// ArchiveRetention is an archiving service's hot window and retention
// schedule.
type ArchiveRetention struct {
	Enabled       bool `json:"enabled"`
	HotWindowDays int  `json:"hot_window_days"`
	// RetentionDays: archived table → days after an archive's newest record
	// that it becomes purgeable (0: never).
	RetentionDays map[string]int `json:"retention_days"`
	// SubjectKeyFingerprint is the first 8 bytes (hex) of the subject key's
	// fingerprint (subject.Key.Fingerprint, never the key), absent without
	// a key: `craigctl fleet check` reports archiving services whose keys
	// differ, since their subject holds could never be compared.
	SubjectKeyFingerprint string `json:"subject_key_fingerprint,omitempty"`
	// SubjectKinds are the subject kinds its archived tables declare
	// (sorted; empty when none): `craigctl subject … --fleet` skips a
	// service that declares none of a subject's kind.
	SubjectKinds []string `json:"subject_kinds"`
}

// retention is the service's effective windows.
func (r *runtime[T]) retention() Retention {
	out := Retention{
		Service: r.spec.Name, EventOutboxRetentionDays: r.tr.EventOutboxRetentionDays,
		EventInboxRetentionDays: r.tr.EventInboxRetentionDays, ReplayMaxAgeDays: r.tr.ReplayMaxAgeDays,
		Tables: map[string]int{},
	}
	for _, p := range sweep.Policies(Groups(r.spec, r.cfg)) {
		out.Tables[p.Label()] = p.WindowDays
	}
	if as, ok := r.archiveSettings(); ok {
		days := retentionSchedule(r.spec, r.cfg) // every archived table, 0 when unscheduled
		out.Archive = &ArchiveRetention{Enabled: as.Enabled, HotWindowDays: as.HotWindowDays, RetentionDays: days, SubjectKinds: []string{}}
		for _, spec := range archiveTables(r.spec, r.cfg) {
			for _, sub := range spec.Subjects {
				if k := string(sub.Kind); !slices.Contains(out.Archive.SubjectKinds, k) {
					out.Archive.SubjectKinds = append(out.Archive.SubjectKinds, k)
				}
			}
		}
		slices.Sort(out.Archive.SubjectKinds)
		if key, err := as.SubjectKey(); err == nil && key.Valid() {
			out.Archive.SubjectKeyFingerprint = hex.EncodeToString(key.Fingerprint()[:8])
		}
	}
	return out
}

// adminKeys are the admin API's token verifier (nil: no key configured)
// and its refusal metrics.
type adminKeys struct {
	verifier *auth.Verifier
	metrics  *metrics.Admin
}

func (r *runtime[T]) adminKeys(reg prometheus.Registerer) (adminKeys, error) {
	am, err := metrics.NewAdmin(reg)
	if err != nil {
		return adminKeys{}, err
	}
	am.Known(auth.Reasons())
	v, err := r.verifier()
	return adminKeys{verifier: v, metrics: am}, err
}

// verifier is the service's archive API token verifier (nil: no key
// configured).
func (r *runtime[T]) verifier() (*auth.Verifier, error) {
	if !r.tr.Auth.Configured() {
		return nil, nil
	}
	v, err := auth.NewVerifier(auth.Config{
		HS256Secret: r.tr.Auth.JWTHS256Secret, HS256SecretFile: r.tr.Auth.JWTHS256SecretFile, PublicKeyFile: r.tr.Auth.JWTPublicKeyFile,
		JWKSFile: r.tr.Auth.JWKSFile, Issuer: r.tr.Auth.Issuer, Audience: r.tr.Auth.Audience,
	})
	if err != nil {
		return nil, fmt.Errorf("archive API key (%s): %w", settings.EnvVar(r.spec.Name, "auth.*"), err)
	}
	return v, nil
}

// RetentionAPI serves GET /admin/retention. It answers a bearer token that
// is either a JWT with archive:read (when a key is configured) or the
// admin_token (when one is set); with neither configured the service is on
// loopback only (settings refuse otherwise) and the call is open, like the
// rest of its admin API.
type RetentionAPI struct {
	Retention  Retention
	Verifier   *auth.Verifier
	AdminToken string
	Metrics    *metrics.Admin
	Logger     *slog.Logger
}

func (a *RetentionAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/retention", a.serve)
}

func (a *RetentionAPI) serve(w http.ResponseWriter, r *http.Request) {
	g := tokenGate{Verifier: a.Verifier, AdminToken: a.AdminToken, Metrics: a.Metrics, Logger: a.Logger, What: "retention API"}
	if _, ok := g.allow(w, r, auth.ScopeRead); !ok {
		return
	}
	writeJSON(w, http.StatusOK, a.Retention)
}

// tokenGate authenticates the admin endpoints every service serves (the
// windows, the outbox's dead letters): a bearer token that is either a JWT
// with the endpoint's scope (when a key is configured) or the admin_token
// (when one is set); with neither configured the service is on loopback
// only (settings refuse otherwise) and the call is open, like the rest of
// its admin API.
type tokenGate struct {
	Verifier   *auth.Verifier
	AdminToken string
	Metrics    *metrics.Admin
	Logger     *slog.Logger
	// What names the API in the refusal's log line.
	What string
}

// Actors of a call not made with a JWT.
const (
	actorAdminToken = "system:admin_token"
	actorLoopback   = "system:loopback"
)

// allow answers the refusal (401, or 403 naming scope) and returns false,
// or returns the caller's identity: the token's normalized subject, or
// actorAdminToken, or actorLoopback when nothing is configured.
func (g tokenGate) allow(w http.ResponseWriter, r *http.Request, scope string) (string, bool) {
	actor, err := g.authenticate(r, scope)
	if err == nil {
		return actor, true
	}
	if g.Metrics != nil {
		g.Metrics.AuthFailures.WithLabelValues(err.Reason).Inc()
	}
	g.Logger.WarnContext(r.Context(), g.What+" request refused", slog.String("reason", err.Reason),
		slog.String("remote", r.RemoteAddr), slog.String("error", err.Error()))
	if err.Reason == auth.ReasonScope {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope", "required": scope})
		return "", false
	}
	w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token"})
	return "", false
}

// authenticate returns the caller's identity when the request may call an
// endpoint needing scope.
func (g tokenGate) authenticate(r *http.Request, scope string) (string, *auth.Error) {
	if g.Verifier == nil && g.AdminToken == "" {
		return actorLoopback, nil
	}
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	raw = strings.TrimSpace(raw)
	if !ok || raw == "" {
		return "", &auth.Error{Reason: auth.ReasonMissing, Err: errors.New("no bearer token")}
	}
	if g.AdminToken != "" && subtle.ConstantTimeCompare([]byte(raw), []byte(g.AdminToken)) == 1 {
		return actorAdminToken, nil
	}
	if g.Verifier == nil {
		return "", &auth.Error{Reason: auth.ReasonSignature, Err: errors.New("the bearer token is not the admin token")}
	}
	p, err := g.Verifier.Verify(r.Context(), raw)
	var ae *auth.Error
	switch {
	case errors.As(err, &ae):
		return "", ae
	case err != nil:
		return "", &auth.Error{Reason: auth.ReasonMalformed, Err: err}
	case reservedActor(p.Subject):
		return "", &auth.Error{Reason: auth.ReasonClaims, Err: fmt.Errorf("sub %q is reserved", p.Subject)}
	case !p.Has(scope):
		return "", &auth.Error{Reason: auth.ReasonScope, Err: fmt.Errorf("%s lacks %s", p.Subject, scope)}
	}
	return p.Subject, nil
}
