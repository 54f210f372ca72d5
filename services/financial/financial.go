// Package financial wires the financial service into the shared service
// binary: its settings, and its local sweep of subsidy_reconcile_queue next
// to the transport sweep every service runs.
package financial

import (
	"context"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	financialmigrations "github.com/craig/retention/migrations/financial"
	"github.com/craig/retention/services/financial/internal/queries"
)

// Name is the service name (environment prefix CRAIG_FINANCIAL__).
const Name = "financial"

// ReconcileTable is the swept reconciliation queue.
const ReconcileTable = "subsidy_reconcile_queue"

// Settings are the financial service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
}

// DefaultSettings returns the financial defaults.
func DefaultSettings() Settings {
	return Settings{
		Transport: settings.DefaultTransport(app.DefaultDatabaseURL(Name)),
	}
}

// Tables is the financial service's table registry: each exported method
// is one table (app.LocalsOf). A new table is a method in a file of its own.
type Tables struct{}

// Reconcile is the local sweep of settled rows: processed_at IS NOT NULL
// AND processed_at < cutoff, never a dead-lettered row.
func (Tables) Reconcile() app.Local[Settings] {
	return app.Local[Settings]{
		Sweep: prune.Declaration{
			Table:     ReconcileTable,
			AgeColumn: "processed_at",
			Eligible:  "processed_at IS NOT NULL AND dead_lettered_at IS NULL",
			Keep:      "processed_at IS NULL OR dead_lettered_at IS NOT NULL",
			Invariant: "reconcile_settled_retention_overrun",
			DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
				return queries.New(db).DeleteProcessedReconcileBatch(ctx, queries.DeleteProcessedReconcileBatchParams{WindowDays: p.WindowDays, BatchLimit: p.Limit})
			},
		},
		DefaultWindowDays: settings.DefaultLocalRetentionDays,
		Doc:               "Days a processed reconciliation row is kept after its `processed_at`; unprocessed and dead-lettered rows are never deleted",
	}
}

// ReconcilePolicy is the reconcile sweep at the window of s.
func ReconcilePolicy(s Settings) prune.Policy { return Tables{}.Reconcile().PolicyFor(s.Transport) }

// Spec is the financial service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:       Name,
		Defaults:   DefaultSettings(),
		Transport:  func(s Settings) settings.Transport { return s.Transport },
		Migrations: financialmigrations.Set(),
		Locals:     app.LocalsOf[Settings](Tables{}),
	}
}
