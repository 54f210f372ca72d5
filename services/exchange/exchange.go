// Package exchange wires the exchange service into the shared service
// binary: its settings, and its local sweep of exchange_send_jobs next to the
// transport sweep every service runs.
package exchange

import (
	"context"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/services/exchange/internal/queries"
)

// Name is the service name (environment prefix CRAIG_EXCHANGE__).
const Name = "exchange"

// SendJobsTable is the swept table of terminal delivery jobs.
const SendJobsTable = "exchange_send_jobs"

// SendJobsLockKey fences the exchange_send_jobs sweep of this service's
// replicas; it differs from the transport key so the two never wait on
// each other.
const SendJobsLockKey int64 = 0x4352_4149_4702_0001

// Settings are the exchange service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
	// SendJobsRetentionDays is how long terminal ('sent', 'failed') jobs
	// are kept after completion; 0 disables the sweep.
	SendJobsRetentionDays int `koanf:"exchange_send_jobs_retention_days"`
}

// Problems validates every key.
func (s Settings) Problems() []settings.Problem {
	return append(s.Transport.Problems(), settings.WindowProblems("exchange_send_jobs_retention_days", s.SendJobsRetentionDays)...)
}

// DefaultSettings returns the exchange defaults.
func DefaultSettings() Settings {
	return Settings{
		Transport:             settings.DefaultTransport(app.DefaultDatabaseURL(Name)),
		SendJobsRetentionDays: settings.DefaultLocalRetentionDays,
	}
}

// SendJobsPolicy sweeps terminal jobs: status IN ('sent', 'failed') AND
// completed_at < cutoff. Pending, in-flight and dead-letter jobs never match.
func SendJobsPolicy(s Settings) prune.Policy {
	return prune.Policy{
		Table:      SendJobsTable,
		WindowDays: s.SendJobsRetentionDays,
		AgeColumn:  "completed_at",
		Eligible:   "status IN ('sent', 'failed')",
		Invariant:  "send_jobs_retention_overrun",
		DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
			return queries.New(db).DeleteTerminalSendJobsBatch(ctx, queries.DeleteTerminalSendJobsBatchParams{WindowDays: p.WindowDays, BatchLimit: p.Limit})
		},
	}
}

// Spec is the exchange service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:      Name,
		Defaults:  DefaultSettings(),
		Transport: func(s Settings) settings.Transport { return s.Transport },
		LocalGroups: func(s Settings) []sweep.Group {
			return []sweep.Group{{Name: SendJobsTable, LockKey: SendJobsLockKey, Policies: []prune.Policy{SendJobsPolicy(s)}}}
		},
	}
}
