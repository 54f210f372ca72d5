// Package financial wires the financial service into the shared service
// binary: its settings, and its local sweep of subsidy_reconcile_queue next
// to the transport sweep every service runs.
package financial

import (
	"context"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/services/financial/internal/queries"
)

// Name is the service name (environment prefix CRAIG_FINANCIAL__).
const Name = "financial"

// ReconcileTable is the swept reconciliation queue.
const ReconcileTable = "subsidy_reconcile_queue"

// ReconcileLockKey fences the subsidy_reconcile_queue sweep of this
// service's replicas, apart from the transport sweep's key.
const ReconcileLockKey int64 = 0x4352_4149_4703_0001

// Settings are the financial service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
	// ReconcileRetentionDays is how long processed reconciliation rows are
	// kept after processing; 0 disables the sweep.
	ReconcileRetentionDays int `koanf:"subsidy_reconcile_queue_retention_days"`
}

// Problems validates every key.
func (s Settings) Problems() []settings.Problem {
	return append(s.Transport.Problems(), settings.WindowProblems("subsidy_reconcile_queue_retention_days", s.ReconcileRetentionDays)...)
}

// DefaultSettings returns the financial defaults.
func DefaultSettings() Settings {
	return Settings{
		Transport:              settings.DefaultTransport(app.DefaultDatabaseURL(Name)),
		ReconcileRetentionDays: settings.DefaultLocalRetentionDays,
	}
}

// ReconcilePolicy sweeps settled rows: processed_at IS NOT NULL AND
// processed_at < cutoff, never a dead-lettered row.
func ReconcilePolicy(s Settings) prune.Policy {
	return prune.Policy{
		Table:      ReconcileTable,
		WindowDays: s.ReconcileRetentionDays,
		AgeColumn:  "processed_at",
		Eligible:   "processed_at IS NOT NULL AND dead_lettered_at IS NULL",
		Invariant:  "reconcile_settled_retention_overrun",
		DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
			return queries.New(db).DeleteProcessedReconcileBatch(ctx, queries.DeleteProcessedReconcileBatchParams{WindowDays: p.WindowDays, BatchLimit: p.Limit})
		},
	}
}

// Spec is the financial service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:      Name,
		Defaults:  DefaultSettings(),
		Transport: func(s Settings) settings.Transport { return s.Transport },
		LocalGroups: func(s Settings) []sweep.Group {
			return []sweep.Group{{Name: ReconcileTable, LockKey: ReconcileLockKey, Policies: []prune.Policy{ReconcilePolicy(s)}}}
		},
	}
}
