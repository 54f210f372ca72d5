// Package exchange wires the exchange service into the shared service
// binary: its settings, and its local sweep of exchange_send_jobs next to the
// transport sweep every service runs.
package exchange

import (
	"context"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	exchangemigrations "github.com/craig/retention/migrations/exchange"
	"github.com/craig/retention/services/exchange/internal/queries"
)

// Name is the service name (environment prefix CRAIG_EXCHANGE__).
const Name = "exchange"

// SendJobsTable is the swept table of terminal delivery jobs.
const SendJobsTable = "exchange_send_jobs"

// Settings are the exchange service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
}

// DefaultSettings returns the exchange defaults.
func DefaultSettings() Settings {
	return Settings{
		Transport: settings.DefaultTransport(app.DefaultDatabaseURL(Name)),
	}
}

// Tables is the exchange service's table registry: each exported method is
// one table (app.LocalsOf). A new table is a method in a file of its own.
type Tables struct{}

// SendJobs is the local sweep of terminal jobs: status IN ('sent',
// 'failed') AND completed_at < cutoff. Pending, in-flight and dead-letter
// jobs never match.
func (Tables) SendJobs() app.Local[Settings] {
	return app.Local[Settings]{
		Sweep: prune.Declaration{
			Table:     SendJobsTable,
			AgeColumn: "completed_at",
			Eligible:  "status IN ('sent', 'failed')",
			Keep:      "status NOT IN ('sent', 'failed')",
			Invariant: "send_jobs_retention_overrun",
			DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
				return queries.New(db).DeleteTerminalSendJobsBatch(ctx, queries.DeleteTerminalSendJobsBatchParams{WindowDays: p.WindowDays, BatchLimit: p.Limit})
			},
		},
		DefaultWindowDays: settings.DefaultLocalRetentionDays,
		Doc:               "Days a terminal ('sent', 'failed') job is kept after its `completed_at`; pending, in-flight and dead-letter jobs are never deleted",
	}
}

// SendJobsPolicy is the send-jobs sweep at the window of s.
func SendJobsPolicy(s Settings) prune.Policy { return Tables{}.SendJobs().PolicyFor(s.Transport) }

// Spec is the exchange service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:       Name,
		Defaults:   DefaultSettings(),
		Transport:  func(s Settings) settings.Transport { return s.Transport },
		Migrations: exchangemigrations.Set(),
		Locals:     app.LocalsOf[Settings](Tables{}),
	}
}
