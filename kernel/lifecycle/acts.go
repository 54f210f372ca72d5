package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/store"
)

// MaxListed bounds a listing of acts (purges, dispositions,
// certificates): a console page shows the newest; the ledger keeps all.
const MaxListed = 500

// The kinds of act that write a certificate (ADR-074).
const (
	KindPurge       = "purge"
	KindExpungement = "expungement"
	KindDisposition = "disposition"
)

// PurgeSummary is one purge of the listing (GET /admin/archive/purges).
type PurgeSummary struct {
	PurgeID        uuid.UUID  `json:"purge_id"`
	Status         string     `json:"status"`
	Candidates     int        `json:"candidates"`
	RequestedBy    string     `json:"requested_by"`
	RequestedAt    time.Time  `json:"requested_at"`
	ApprovedBy     *string    `json:"approved_by"`
	ExecutedAt     *time.Time `json:"executed_at"`
	Purged         int        `json:"purged"`
	CertificateKey *string    `json:"certificate_key"`
}

// ListPurges lists the service's purges newest first, those of one
// status when status is not empty.
func (m *Manager) ListPurges(ctx context.Context, status string) ([]PurgeSummary, error) {
	var st *string
	switch status {
	case "":
	case "awaiting_approval", "executed":
		st = &status
	default:
		return nil, fmt.Errorf("%w: status %q: awaiting_approval or executed", ErrInvalid, status)
	}
	rows, err := queries.New(m.pool).ListPurges(ctx, queries.ListPurgesParams{Status: st, MaxRows: MaxListed})
	if err != nil {
		return nil, fmt.Errorf("list purges: %w", err)
	}
	out := make([]PurgeSummary, 0, len(rows))
	for _, r := range rows {
		out = append(out, PurgeSummary{PurgeID: r.PurgeID.Bytes, Status: r.Status, Candidates: int(r.Candidates),
			RequestedBy: r.RequestedBy, RequestedAt: r.RequestedAt.Time.UTC(), ApprovedBy: r.ApprovedBy,
			ExecutedAt: timePtr(r.ExecutedAt), Purged: int(r.Purged), CertificateKey: r.CertificateKey})
	}
	return out, nil
}

// CertificateSummary is one certificate of the listing.
type CertificateSummary struct {
	Kind           string    `json:"kind"`
	ID             uuid.UUID `json:"id"`
	CertificateKey string    `json:"certificate_key"`
	ExecutedAt     time.Time `json:"executed_at"`
	RequestedBy    string    `json:"requested_by"`
	ApprovedBy     *string   `json:"approved_by"`
}

// ListCertificates lists the service's certificates newest first.
func (m *Manager) ListCertificates(ctx context.Context) ([]CertificateSummary, error) {
	rows, err := queries.New(m.pool).ListCertificates(ctx, MaxListed)
	if err != nil {
		return nil, fmt.Errorf("list certificates: %w", err)
	}
	out := make([]CertificateSummary, 0, len(rows))
	for _, r := range rows {
		if r.CertificateKey == nil {
			continue
		}
		out = append(out, CertificateSummary{Kind: r.Kind, ID: r.ActID.Bytes, CertificateKey: *r.CertificateKey,
			ExecutedAt: r.ExecutedAt.Time.UTC(), RequestedBy: r.RequestedBy, ApprovedBy: r.ApprovedBy})
	}
	return out, nil
}

// CertificateCheck is a certificate as the store holds it and what its
// verification found.
type CertificateCheck struct {
	CertificateSummary
	// Certificate is the object's bytes, verbatim.
	Certificate json.RawMessage `json:"certificate"`
	SHA256      string          `json:"sha256"`
	Verified    Verification    `json:"verification"`
}

// Verification is a certificate checked against the store: the object is
// there and names its act, and no version of any object of the archives
// the act destroyed is left.
type Verification struct {
	OK          bool      `json:"ok"`
	CheckedAt   time.Time `json:"checked_at"`
	NamesAct    bool      `json:"names_act"`
	Destroyed   int       `json:"archives_destroyed"`
	ObjectsGone int       `json:"objects_gone"`
	// Remaining are the keys of which some version is still in the store.
	Remaining []string `json:"remaining"`
}

// Certificate reads an act's certificate from the store and verifies it
// (ErrNotFound for an act without one).
func (m *Manager) Certificate(ctx context.Context, kind string, id uuid.UUID) (CertificateCheck, error) {
	var c CertificateCheck
	var body []byte
	var err error
	if c.CertificateSummary, body, err = m.CertificateObject(ctx, kind, id); err != nil {
		return CertificateCheck{}, err
	}
	sum := sha256.Sum256(body)
	c.SHA256, c.Certificate = hex.EncodeToString(sum[:]), body
	if !json.Valid(body) {
		c.Certificate = nil
	}
	c.Verified, err = m.verifyDestroyed(ctx, id, body)
	return c, err
}

// CertificateObject is an act's certificate as the store holds it, byte
// for byte (ErrNotFound for an act without one).
func (m *Manager) CertificateObject(ctx context.Context, kind string, id uuid.UUID) (CertificateSummary, []byte, error) {
	if m.store == nil {
		return CertificateSummary{}, nil, fmt.Errorf("%w: a certificate is read from the store", ErrInvalid)
	}
	list, err := m.ListCertificates(ctx)
	if err != nil {
		return CertificateSummary{}, nil, err
	}
	for _, s := range list {
		if s.Kind == kind && s.ID == id {
			body, err := m.store.Get(ctx, s.CertificateKey)
			if err != nil {
				return s, nil, fmt.Errorf("certificate %s: %w", s.CertificateKey, err)
			}
			return s, body, nil
		}
	}
	return CertificateSummary{}, nil, fmt.Errorf("%w: no %s certificate %s", ErrNotFound, kind, id)
}

// verifyDestroyed checks that the certificate names its act and that no
// version of any object of the archives the act destroyed remains.
func (m *Manager) verifyDestroyed(ctx context.Context, id uuid.UUID, body []byte) (Verification, error) {
	v := Verification{CheckedAt: time.Now().UTC(), Remaining: []string{}}
	var named map[string]any
	if json.Unmarshal(body, &named) == nil {
		for _, k := range []string{"purge_id", "expunge_id", "disposition_id"} {
			if s, ok := named[k].(string); ok && s == id.String() {
				v.NamesAct = true
			}
		}
	}
	rows, err := queries.New(m.pool).ArchivesDestroyedBy(ctx, pgtype.UUID{Bytes: id, Valid: true})
	if err != nil {
		return v, fmt.Errorf("archives destroyed by %s: %w", id, err)
	}
	v.Destroyed = len(rows)
	for _, r := range rows {
		for _, key := range []string{r.ManifestKey, r.DataKey} {
			n, err := m.store.VersionCount(ctx, key)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return v, fmt.Errorf("versions of %s: %w", key, err)
			}
			if n > 0 {
				v.Remaining = append(v.Remaining, key)
				continue
			}
			v.ObjectsGone++
		}
	}
	v.OK = v.NamesAct && len(v.Remaining) == 0
	return v, nil
}
