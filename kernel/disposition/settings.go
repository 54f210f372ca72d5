package disposition

// Settings are an archiving service's records schedule settings
// (records.*, ADR-073).
type Settings struct {
	// AutoDestroy lets the scheduled worker execute, without a reviewer,
	// what items whose action is destroy make due: it freezes them as
	// system:records-schedule and approves them as system:auto-destroy,
	// hourly. Off (the default): every batch waits for a second identity's
	// review, since destruction is never routine until the agency says so.
	AutoDestroy bool `koanf:"auto_destroy"`
}

// Identities of the scheduled worker's batches (records.auto_destroy).
const (
	AutoProposer = "system:records-schedule"
	AutoApprover = "system:auto-destroy"
)
