package disposition

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/craig/retention/kernel/internal/queries"
)

// MaxListed bounds the batches a listing answers (the newest): a review
// page shows the open ones and the latest decisions; the table keeps all.
const MaxListed = 500

// Statuses are a batch's states, in its life's order.
var Statuses = []string{"proposed", "executing", "executed", "rejected"}

// Summary is one batch of the listing (GET /admin/dispositions).
type Summary struct {
	DispositionID   uuid.UUID  `json:"disposition_id"`
	Status          string     `json:"status"`
	ScheduleVersion string     `json:"schedule_version"`
	AsOf            string     `json:"as_of"`
	Rows            int64      `json:"rows"`
	ProposedBy      string     `json:"proposed_by"`
	ProposedAt      time.Time  `json:"proposed_at"`
	ApprovedBy      *string    `json:"approved_by"`
	ExecutedAt      *time.Time `json:"executed_at"`
	RejectedBy      *string    `json:"rejected_by"`
	RejectedAt      *time.Time `json:"rejected_at"`
	CertificateKey  *string    `json:"certificate_key"`
}

// List lists the batches newest first, those of one status when status is
// not empty.
func (f *Finder) List(ctx context.Context, status string) ([]Summary, error) {
	var st *string
	if status != "" {
		if !slices.Contains(Statuses, status) {
			return nil, fmt.Errorf("%w: status %q: one of %v", ErrInvalid, status, Statuses)
		}
		st = &status
	}
	rows, err := queries.New(f.pool).ListDispositions(ctx, queries.ListDispositionsParams{Status: st, MaxRows: MaxListed})
	if err != nil {
		return nil, fmt.Errorf("list dispositions: %w", err)
	}
	out := make([]Summary, 0, len(rows))
	for _, r := range rows {
		out = append(out, Summary{DispositionID: r.DispositionID.Bytes, Status: r.Status, ScheduleVersion: r.ScheduleVersion,
			AsOf: r.AsOf.Time.Format(time.DateOnly), Rows: r.Rows, ProposedBy: r.ProposedBy, ProposedAt: r.ProposedAt.Time.UTC(),
			ApprovedBy: r.ApprovedBy, ExecutedAt: timePtr(r.ExecutedAt), RejectedBy: r.RejectedBy,
			RejectedAt: timePtr(r.RejectedAt), CertificateKey: r.CertificateKey})
	}
	return out, nil
}
