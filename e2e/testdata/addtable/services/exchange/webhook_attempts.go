package exchange

import (
	"context"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/services/exchange/internal/queries"
)

// WebhookAttempts sweeps finished webhook delivery attempts 14 days after
// they finished; a pending attempt is never deleted.
func (Tables) WebhookAttempts() app.Local[Settings] {
	return app.Local[Settings]{
		Sweep: prune.Declaration{
			Table:     "exchange_webhook_attempts",
			AgeColumn: "finished_at",
			Eligible:  "status IN ('delivered', 'abandoned')",
			Keep:      "status NOT IN ('delivered', 'abandoned')",
			Invariant: "webhook_attempts_retention_overrun",
			DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
				return queries.New(db).DeleteFinishedWebhookAttemptsBatch(ctx, queries.DeleteFinishedWebhookAttemptsBatchParams{WindowDays: p.WindowDays, BatchLimit: p.Limit})
			},
		},
		DefaultWindowDays: 14,
	}
}
