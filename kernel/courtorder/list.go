package courtorder

import (
	"context"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
)

// Seal is a sealed subject as the service lists it: by keyed hash.
type Seal struct {
	SubjectHash string    `json:"subject_hash"`
	OrderRef    string    `json:"order_ref"`
	SealedBy    string    `json:"sealed_by"`
	SealedAt    time.Time `json:"sealed_at"`
}

// Expungement is an order as the service lists it (never its subject).
type Expungement struct {
	ExpungeID      uuid.UUID   `json:"expunge_id"`
	Status         string      `json:"status"`
	OrderRef       string      `json:"order_ref"`
	Commitment     *string     `json:"commitment"`
	Archives       []uuid.UUID `json:"archives"`
	RequestedBy    string      `json:"requested_by"`
	RequestedAt    time.Time   `json:"requested_at"`
	ApprovedBy     *string     `json:"approved_by"`
	ExecutedAt     *time.Time  `json:"executed_at"`
	Rewritten      *int32      `json:"rewritten"`
	RowsRemoved    *int64      `json:"rows_removed"`
	CertificateKey *string     `json:"certificate_key"`
}

// Listing is every seal and order of the service.
type Listing struct {
	Seals        []Seal        `json:"seals"`
	Expungements []Expungement `json:"expungements"`
}

// List returns the service's seals and orders (the newest 1,000 orders).
func (o *Orders) List(ctx context.Context) (Listing, error) {
	q := queries.New(o.pool)
	out := Listing{Seals: []Seal{}, Expungements: []Expungement{}}
	seals, err := q.ListSeals(ctx)
	if err != nil {
		return out, fmt.Errorf("seals: %w", err)
	}
	for _, s := range seals {
		out.Seals = append(out.Seals, Seal{SubjectHash: subject.Hex(s.SubjectHash), OrderRef: s.OrderRef, SealedBy: s.SealedBy, SealedAt: s.SealedAt.Time.UTC()})
	}
	orders, err := q.ListExpungements(ctx)
	if err != nil {
		return out, fmt.Errorf("expungements: %w", err)
	}
	for _, e := range orders {
		x := Expungement{ExpungeID: e.ExpungeID.Bytes, Status: e.Status, OrderRef: e.OrderRef, Archives: uuids(e.Archives),
			RequestedBy: e.RequestedBy, RequestedAt: e.RequestedAt.Time.UTC(), ApprovedBy: e.ApprovedBy,
			Rewritten: e.Rewritten, RowsRemoved: e.RowsRemoved, CertificateKey: e.CertificateKey}
		if e.Sealed { // a sealed subject's archives are not named (ADR-067)
			x.Archives = []uuid.UUID{}
		}
		if e.Commitment != nil {
			c := subject.Hex(e.Commitment)
			x.Commitment = &c
		}
		if e.ExecutedAt.Valid {
			t := e.ExecutedAt.Time.UTC()
			x.ExecutedAt = &t
		}
		out.Expungements = append(out.Expungements, x)
	}
	return out, nil
}
