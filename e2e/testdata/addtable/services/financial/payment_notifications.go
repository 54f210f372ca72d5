package financial

import (
	"context"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/services/financial/internal/queries"
)

// PaymentNotifications sweeps sent notifications 45 days after they were
// sent and failed ones 45 days after they were created (swept_at, a stored
// generated column); a pending notification is never deleted.
func (Tables) PaymentNotifications() app.Local[Settings] {
	return app.Local[Settings]{
		Sweep: prune.Declaration{
			Table:     "payment_notifications",
			AgeColumn: "swept_at",
			Eligible:  "status IN ('sent', 'failed')",
			Keep:      "status NOT IN ('sent', 'failed')",
			Invariant: "payment_notifications_retention_overrun",
			DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
				return queries.New(db).DeleteOldPaymentNotificationsBatch(ctx, queries.DeleteOldPaymentNotificationsBatchParams{WindowDays: p.WindowDays, BatchLimit: p.Limit})
			},
		},
		DefaultWindowDays: 45,
	}
}
