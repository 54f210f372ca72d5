// Package metrics holds the Prometheus instruments of the retention kernel.
// Every instrument is registered on a caller-supplied prometheus.Registerer,
// never the global registry, so tests and binaries own their registries.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Prune instruments the sweep loop.
type Prune struct {
	// RowsPruned counts rows deleted by the sweep, per table
	// (event_rows_pruned_total{table}).
	RowsPruned *prometheus.CounterVec
	// Capped counts cycles stopped by the anomaly cap, per table
	// (retention_prune_capped_total{table}).
	Capped *prometheus.CounterVec
	// PartitionsDropped and PartitionsKept count the old partitions of a
	// range-partitioned table retired whole, and those kept because a row
	// in them must stay (retention_partitions_dropped_total{table},
	// retention_partitions_kept_total{table}).
	PartitionsDropped *prometheus.CounterVec
	PartitionsKept    *prometheus.CounterVec
	// Paused counts the seconds a table's prune waited, per reason: a
	// replica lagging past prune_max_replica_lag, or the WAL rate bound
	// (retention_prune_paused_seconds_total{table,reason}).
	Paused *prometheus.CounterVec
	// Duration observes the wall time of one table's prune
	// (retention_prune_duration_seconds{table}).
	Duration *prometheus.HistogramVec
	// Failures counts failed table prunes, per table
	// (retention_prune_failures_total{table}).
	Failures *prometheus.CounterVec
	// LockSkipped counts cycles skipped because another runner held the
	// lease, per sweep group (retention_prune_lock_skipped_total{group}).
	LockSkipped *prometheus.CounterVec
	// OldestEligibleAge is the age of the oldest row still eligible after
	// the table's prune in the last cycle, 0 when none: the backlog gauge
	// (retention_oldest_eligible_age_seconds{table}).
	OldestEligibleAge *prometheus.GaugeVec
	// BatchTimeouts counts batches that hit the statement or lock timeout
	// (retention_prune_batch_timeouts_total{table}).
	BatchTimeouts *prometheus.CounterVec
	// BatchReduced counts cycles that fell back to the reduced batch size
	// after consecutive timeouts (retention_prune_batch_reduced_total{table}).
	BatchReduced *prometheus.CounterVec
	// BatchYielded counts batches run at the yield batch size because
	// other sessions were committing writes
	// (retention_prune_yielded_batches_total{table}).
	BatchYielded *prometheus.CounterVec
	// LastSuccess is the time a group's cycle last completed without error
	// (retention_sweep_last_success_timestamp_seconds{group}).
	LastSuccess *prometheus.GaugeVec
}

// pruneDurationBuckets span a cheap idle cycle (milliseconds) to a large
// capped backlog drain (minutes).
var pruneDurationBuckets = []float64{0.005, 0.025, 0.1, 0.5, 2.5, 10, 60, 300}

// NewPrune creates the sweep instruments and registers them on reg.
func NewPrune(reg prometheus.Registerer) (*Prune, error) {
	m := &Prune{
		RowsPruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "event_rows_pruned_total",
			Help: "Rows deleted by the retention sweep, per table.",
		}, []string{"table"}),
		Capped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_prune_capped_total",
			Help: "Sweep cycles stopped by the per-cycle anomaly cap, per table.",
		}, []string{"table"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "retention_prune_duration_seconds",
			Help:    "Wall time of one table's prune in a sweep cycle.",
			Buckets: pruneDurationBuckets,
		}, []string{"table"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_prune_failures_total",
			Help: "Table prunes that ended in an error, per table.",
		}, []string{"table"}),
		LockSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_prune_lock_skipped_total",
			Help: "Sweep cycles skipped because another runner held the group's lease.",
		}, []string{"group"}),
		OldestEligibleAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retention_oldest_eligible_age_seconds",
			Help: "Age of the oldest row still eligible for deletion after the table's last prune; 0 when none.",
		}, []string{"table"}),
		BatchTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_prune_batch_timeouts_total",
			Help: "Prune batches that hit the statement or lock timeout, per table.",
		}, []string{"table"}),
		BatchReduced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_prune_batch_reduced_total",
			Help: "Prune cycles that fell back to the reduced batch size after consecutive timeouts, per table.",
		}, []string{"table"}),
		BatchYielded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_prune_yielded_batches_total",
			Help: "Prune batches run at the yield batch size because other sessions were committing writes, per table.",
		}, []string{"table"}),
		LastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retention_sweep_last_success_timestamp_seconds",
			Help: "Unix time at which the sweep group's last cycle completed without error.",
		}, []string{"group"}),
		PartitionsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_partitions_dropped_total",
			Help: "Old partitions of a range-partitioned swept table detached and dropped whole (no row in them had to stay), per table.",
		}, []string{"table"}),
		PartitionsKept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_partitions_kept_total",
			Help: "Old partitions kept because a row in them must stay (their eligible rows are deleted by batches), per table.",
		}, []string{"table"}),
		Paused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_prune_paused_seconds_total",
			Help: "Seconds the retention sweep waited before batches, per table and reason (replica_lag: a streaming replica lagged past prune_max_replica_lag; wal_rate: prune_max_wal_bytes_per_second).",
		}, []string{"table", "reason"}),
	}
	if err := register(reg, m.RowsPruned, m.Capped, m.Duration, m.Failures, m.LockSkipped,
		m.OldestEligibleAge, m.BatchTimeouts, m.BatchReduced, m.BatchYielded, m.LastSuccess, m.PartitionsDropped, m.PartitionsKept, m.Paused); err != nil {
		return nil, err
	}
	return m, nil
}

// Invariants exposes the watchdogs' findings to Prometheus.
type Invariants struct {
	// Violations is the number of rows overrunning each invariant's
	// threshold at its last check (retention_invariant_violations{invariant}).
	Violations *prometheus.GaugeVec
}

// NewInvariants creates the invariant gauge and registers it on reg.
func NewInvariants(reg prometheus.Registerer) (*Invariants, error) {
	m := &Invariants{Violations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "retention_invariant_violations",
		Help: "Rows overrunning a retention invariant (window + grace) at its last check; non-zero means a sweep has stopped.",
	}, []string{"invariant"})}
	if err := register(reg, m.Violations); err != nil {
		return nil, err
	}
	return m, nil
}

// Outbox instruments the outbox drain: a broker outage must be visible.
type Outbox struct {
	// Pending is the number of unpublished outbox rows at the last check
	// (outbox_pending_rows).
	Pending prometheus.Gauge
	// OldestPendingAge is the age of the oldest unpublished row, 0 when none
	// (outbox_oldest_pending_age_seconds): it grows while the drain is
	// stopped (broker down, publisher failing).
	OldestPendingAge prometheus.Gauge
	// PublishFailures counts failed publish attempts, including attempts
	// refused because the broker is unreachable
	// (outbox_publish_failures_total).
	PublishFailures prometheus.Counter
	// DeadLettered counts outbox rows dead-lettered by the drain: a
	// malformed envelope at once, a row the broker kept refusing after
	// outbox.max_attempts (event_outbox_dead_lettered_total).
	DeadLettered prometheus.Counter
	// DeadLetters is the number of dead-lettered outbox rows at the last
	// check (event_outbox_dead_letter_rows): evidence of events that never
	// left, waiting for an operator.
	DeadLetters prometheus.Gauge
}

// NewOutbox creates the outbox instruments and registers them on reg.
func NewOutbox(reg prometheus.Registerer) (*Outbox, error) {
	m := &Outbox{
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_pending_rows",
			Help: "Unpublished outbox rows at the last check (pending events, the evidence of undelivered events).",
		}),
		OldestPendingAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_oldest_pending_age_seconds",
			Help: "Age of the oldest unpublished outbox row at the last check; 0 when none. Grows while the drain is stopped.",
		}),
		PublishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_publish_failures_total",
			Help: "Outbox publish attempts that failed, including those refused while the broker is unreachable.",
		}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "event_outbox_dead_lettered_total",
			Help: "Outbox rows dead-lettered by the drain: malformed at once, or refused outbox.max_attempts times. Never published, never swept as published.",
		}),
		DeadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "event_outbox_dead_letter_rows",
			Help: "Dead-lettered outbox rows at the last check: events that never left, kept until outbox.dead_letter_retention_days (0: forever).",
		}),
	}
	if err := register(reg, m.Pending, m.OldestPendingAge, m.PublishFailures, m.DeadLettered, m.DeadLetters); err != nil {
		return nil, err
	}
	return m, nil
}

// Archive instruments the archive-then-prune engine.
type Archive struct {
	// RowsArchived counts rows archived and deleted, per table
	// (archive_rows_archived_total{table}).
	RowsArchived *prometheus.CounterVec
	// Quarantined counts rows skipped because one alone exceeds
	// max_batch_bytes (retention_quarantined_total{table}).
	Quarantined *prometheus.CounterVec
	// Failures counts table batches that failed, per table and kind
	// (archive_failures_total{table,kind}).
	Failures *prometheus.CounterVec
	// LastSuccess is when the service's last pass completed with no table
	// error (archive_last_success_timestamp_seconds{service}).
	LastSuccess *prometheus.GaugeVec
	// Backlog is, per table, the age of the oldest row past its hot window
	// still in the hot table after the last pass; 0 when none
	// (archive_backlog_oldest_age_seconds{table}; no series before a pass).
	Backlog *prometheus.GaugeVec
	// OrphansDestroyed counts objects written and never booked (their
	// upload intent left behind) whose every version was destroyed, per
	// table (archive_orphans_destroyed_total{table}, ADR-069).
	OrphansDestroyed *prometheus.CounterVec
	// UnparsedSubjects is, per table, the rows whose declared subject field
	// holds a digit but yields no subject, at the last pass
	// (retention_subject_unparsed_rows{table}; no series before a pass, none
	// for a table that declares no field).
	UnparsedSubjects *prometheus.GaugeVec
}

// NewArchive creates the archive instruments and registers them on reg.
func NewArchive(reg prometheus.Registerer) (*Archive, error) {
	m := &Archive{
		RowsArchived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_rows_archived_total",
			Help: "Rows written to the object store and deleted from the hot table, per table.",
		}, []string{"table"}),
		Quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "retention_quarantined_total",
			Help: "Rows skipped by the archiver because a single row exceeds max_batch_bytes, per table.",
		}, []string{"table"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_failures_total",
			Help: "Archive batches that failed, per table and kind (store, db, bookkeep, config).",
		}, []string{"table", "kind"}),
		LastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "archive_last_success_timestamp_seconds",
			Help: "Unix time at which the service's last archive pass completed without a table error.",
		}, []string{"service"}),
		Backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "archive_backlog_oldest_age_seconds",
			Help: "Age of the oldest row past its table's hot window still in the hot table after the last archive pass; 0 when none.",
		}, []string{"table"}),
		OrphansDestroyed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_orphans_destroyed_total",
			Help: "Objects an archive pass or an expungement wrote and never booked (an upload intent left behind), every version destroyed, per table.",
		}, []string{"table"}),
		UnparsedSubjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retention_subject_unparsed_rows",
			Help: "Hot rows whose declared subject field holds a digit but yields no subject (no fetch, hold, seal or order reaches them), per table, at the last archive pass.",
		}, []string{"table"}),
	}
	if err := register(reg, m.RowsArchived, m.Quarantined, m.Failures, m.LastSuccess, m.Backlog, m.OrphansDestroyed, m.UnparsedSubjects); err != nil {
		return nil, err
	}
	return m, nil
}

// Fleet instruments security's fleet ledger and the inbound event path.
type Fleet struct {
	// Booked counts archives newly booked in the fleet ledger, per source
	// (archive_records_booked_total{source_service}).
	Booked *prometheus.CounterVec
	// Refused counts archive events refused before any write, per rule
	// broken (archive_event_refused_total{reason}; a fixed set of reasons).
	Refused *prometheus.CounterVec
	// Divergence counts replays of a booked archive that differ from the
	// booked row (archive_ledger_divergence_total{source_service}).
	Divergence *prometheus.CounterVec
	// DeadLettered counts events recorded in dead_letter_audit after their
	// last failed delivery (events_dead_lettered_total).
	DeadLettered prometheus.Counter
}

// NewFleet creates the fleet ledger instruments and registers them on reg.
func NewFleet(reg prometheus.Registerer) (*Fleet, error) {
	m := &Fleet{
		Booked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_records_booked_total",
			Help: "Archives newly booked in the fleet ledger (archive_records), per source service.",
		}, []string{"source_service"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_event_refused_total",
			Help: "Archive events refused before any write, per rule broken (signature, source_service, table, key_prefix, ...).",
		}, []string{"reason"}),
		Divergence: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_ledger_divergence_total",
			Help: "Replays of a booked archive whose facts differ from the booked row (the row is never changed), per source service.",
		}, []string{"source_service"}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_dead_lettered_total",
			Help: "Events recorded in dead_letter_audit after their last failed delivery.",
		}),
	}
	if err := register(reg, m.Booked, m.Refused, m.Divergence, m.DeadLettered); err != nil {
		return nil, err
	}
	return m, nil
}

// Purge instruments the archive purge.
type Purge struct {
	// Purged counts archives destroyed (objects deleted, ledger stamped),
	// per table (archive_purged_total{table}).
	Purged *prometheus.CounterVec
	// Refused counts archives or requests a purge refused, per reason
	// (archive_purge_refused_total{reason}: no_longer_eligible,
	// self_approval, already_running).
	Refused *prometheus.CounterVec
	// HoldLockDrift is the number of objects of held archives the last
	// store-lock reconciliation found without their Object Lock legal hold
	// (each then locked): archive_hold_lock_drift. Not 0 means a hold was
	// not enforced by the store until then.
	HoldLockDrift prometheus.Gauge
}

// NewPurge creates the purge instruments and registers them on reg.
func NewPurge(reg prometheus.Registerer) (*Purge, error) {
	m := &Purge{
		Purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_purged_total",
			Help: "Archives destroyed by a purge (manifest and data deleted, ledger stamped), per table.",
		}, []string{"table"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_purge_refused_total",
			Help: "Archives skipped or purge requests refused, per reason.",
		}, []string{"reason"}),
		HoldLockDrift: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "archive_hold_lock_drift",
			Help: "Objects of held archives the last store-lock reconciliation found without their Object Lock legal hold (then locked).",
		}),
	}
	if err := register(reg, m.Purged, m.Refused, m.HoldLockDrift); err != nil {
		return nil, err
	}
	return m, nil
}

// Verify instruments archive verification.
type Verify struct {
	// Failures counts archives that failed verification, per kind
	// (archive_verify_failures_total{kind}).
	Failures *prometheus.CounterVec
	// Last is when the last verification finished
	// (archive_last_verify_timestamp_seconds).
	Last prometheus.Gauge
	// Orphans are the objects under the service's prefix no ledger row
	// names, at the last verification (archive_orphan_objects). A vector
	// without labels: no series until a verification counted them, so a
	// boot's "nothing counted yet" is never a 0 that the first count seems
	// to grow from.
	Orphans *prometheus.GaugeVec
}

// NewVerify creates the verification instruments and registers them on reg.
func NewVerify(reg prometheus.Registerer) (*Verify, error) {
	m := &Verify{
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "archive_verify_failures_total",
			Help: "Archives that failed verification, per kind (missing_data, missing_manifest, manifest_mismatch, sha256, line_count, line_range).",
		}, []string{"kind"}),
		Last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "archive_last_verify_timestamp_seconds",
			Help: "Unix time at which the last archive verification finished.",
		}),
		Orphans: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "archive_orphan_objects",
			Help: "Objects under the service's prefix that no ledger row names, at the last verification (absent until one).",
		}, nil),
	}
	if err := register(reg, m.Failures, m.Last, m.Orphans); err != nil {
		return nil, err
	}
	return m, nil
}

// Admin instruments the archive API's authentication.
type Admin struct {
	// AuthFailures counts refused requests, per reason
	// (admin_auth_failures_total{reason}: missing, malformed, expired,
	// signature, algorithm, issuer, audience, claims, insufficient_scope).
	AuthFailures *prometheus.CounterVec
}

// NewAdmin creates the admin API instruments and registers them on reg.
func NewAdmin(reg prometheus.Registerer) (*Admin, error) {
	m := &Admin{AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "admin_auth_failures_total",
		Help: "Archive API requests refused by authentication or authorization, per reason.",
	}, []string{"reason"})}
	if err := register(reg, m.AuthFailures); err != nil {
		return nil, err
	}
	return m, nil
}

// Known creates, at 0, the series of every swept table and sweep group and
// of every pause reason, so that the first event moves a series that
// already exists (increase() sees it) and a group that has never completed
// a cycle shows 0 as its last success.
func (m *Prune) Known(tables, groups, pauseReasons []string) {
	for _, t := range tables {
		for _, c := range []*prometheus.CounterVec{m.RowsPruned, m.Capped, m.Failures, m.BatchTimeouts, m.BatchReduced,
			m.BatchYielded, m.PartitionsDropped, m.PartitionsKept} {
			c.WithLabelValues(t)
		}
		m.Duration.WithLabelValues(t)
		for _, r := range pauseReasons {
			m.Paused.WithLabelValues(t, r)
		}
	}
	for _, g := range groups {
		m.LockSkipped.WithLabelValues(g)
		m.LastSuccess.WithLabelValues(g)
	}
}

// Known creates, at 0, the series of every archived table and failure
// kind, and the service's last success (0: never).
func (m *Archive) Known(service string, tables, kinds []string) {
	for _, t := range tables {
		m.RowsArchived.WithLabelValues(t)
		m.Quarantined.WithLabelValues(t)
		m.OrphansDestroyed.WithLabelValues(t)
		for _, k := range kinds {
			m.Failures.WithLabelValues(t, k)
		}
	}
	m.LastSuccess.WithLabelValues(service)
}

// Known creates, at 0, the series of every refusal reason and known source.
func (m *Fleet) Known(reasons, sources []string) {
	for _, r := range reasons {
		m.Refused.WithLabelValues(r)
	}
	for _, s := range sources {
		m.Booked.WithLabelValues(s)
		m.Divergence.WithLabelValues(s)
	}
}

// Known creates, at 0, the series of every archived table and refusal.
func (m *Purge) Known(tables, reasons []string) {
	for _, t := range tables {
		m.Purged.WithLabelValues(t)
	}
	for _, r := range reasons {
		m.Refused.WithLabelValues(r)
	}
}

// Known creates, at 0, the series of every verify failure kind.
func (m *Verify) Known(kinds []string) {
	for _, k := range kinds {
		m.Failures.WithLabelValues(k)
	}
}

// Observe records one finished verification: each failure's kind, the
// orphans it found and its time.
func (m *Verify) Observe(failureKinds []string, orphans int) {
	for _, k := range failureKinds {
		m.Failures.WithLabelValues(k).Inc()
	}
	m.Orphans.WithLabelValues().Set(float64(orphans))
	m.Last.SetToCurrentTime()
}

// Ledger instruments the archive ledger's lifecycle states.
type Ledger struct {
	// Archives counts each table's archives per state: kept, held, due,
	// undated, purged (archive_ledger_archives{table,state}).
	Archives *prometheus.GaugeVec
}

// NewLedger creates the ledger's instruments and registers them on reg.
func NewLedger(reg prometheus.Registerer) (*Ledger, error) {
	m := &Ledger{Archives: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "archive_ledger_archives",
		Help: "Archives of the service's ledger per table and lifecycle state (kept, held, due, undated, purged).",
	}, []string{"table", "state"})}
	if err := register(reg, m.Archives); err != nil {
		return nil, err
	}
	return m, nil
}

// Known creates, at 0, every table's series of every state.
func (m *Ledger) Known(tables, states []string) {
	for _, t := range tables {
		for _, s := range states {
			m.Archives.WithLabelValues(t, s)
		}
	}
}

// Known creates, at 0, the series of every refusal reason.
func (m *Admin) Known(reasons []string) {
	for _, r := range reasons {
		m.AuthFailures.WithLabelValues(r)
	}
}

// Vacuum instruments the vacuum watchdog (kernel/vacuumwatch): what keeps
// VACUUM from reclaiming the rows the sweeps delete.
type Vacuum struct {
	// HorizonAge is, per holder kind (backend, prepared, slot), the age in
	// transactions of the oldest xmin held back
	// (retention_vacuum_horizon_age_xids{holder}); 0 when none.
	HorizonAge *prometheus.GaugeVec
	// HorizonHeld is, per holder kind, the longest a session or prepared
	// transaction has held its xmin, in seconds
	// (retention_vacuum_horizon_held_seconds{holder}); 0 when none (and
	// for slots: the server does not know).
	HorizonHeld *prometheus.GaugeVec
	// SlotRetainedWAL is the WAL each replication slot keeps, in bytes
	// (retention_slot_retained_wal_bytes{slot}).
	SlotRetainedWAL *prometheus.GaugeVec
	// DeadTuples is each swept table's dead tuples at the last reading
	// (retention_dead_tuples{table}).
	DeadTuples *prometheus.GaugeVec
	// Limit is each of the watchdog's thresholds as configured (the
	// vacuum_* settings; 0: disabled), so the alerts compare with the
	// service's own (retention_vacuum_limit{limit}).
	Limit *prometheus.GaugeVec
	slots map[string]bool
}

// NewVacuum creates the vacuum watchdog's instruments and registers them on reg.
func NewVacuum(reg prometheus.Registerer) (*Vacuum, error) {
	m := &Vacuum{
		HorizonAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retention_vacuum_horizon_age_xids",
			Help: "Age in transactions of the oldest xmin holding back VACUUM, per holder kind (backend, prepared, slot); 0 when none.",
		}, []string{"holder"}),
		HorizonHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retention_vacuum_horizon_held_seconds",
			Help: "Longest time a session or prepared transaction has held back VACUUM's xmin horizon, per holder kind; 0 when none.",
		}, []string{"holder"}),
		SlotRetainedWAL: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retention_slot_retained_wal_bytes",
			Help: "WAL a replication slot keeps on the primary, in bytes, per slot.",
		}, []string{"slot"}),
		DeadTuples: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retention_dead_tuples",
			Help: "Dead tuples of a swept table at the last reading (VACUUM has not reclaimed them yet).",
		}, []string{"table"}),
		Limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "retention_vacuum_limit",
			Help: "The vacuum watchdog's thresholds as configured (horizon_held_seconds, slot_retained_wal_bytes, dead_tuples); 0 when disabled.",
		}, []string{"limit"}),
		slots: map[string]bool{},
	}
	if err := register(reg, m.HorizonAge, m.HorizonHeld, m.SlotRetainedWAL, m.DeadTuples, m.Limit); err != nil {
		return nil, err
	}
	return m, nil
}

// Known creates, at 0, the horizon series of every holder kind.
func (m *Vacuum) Known(holders []string) {
	for _, h := range holders {
		m.HorizonAge.WithLabelValues(h)
		m.HorizonHeld.WithLabelValues(h)
	}
}

// ForgetSlotsExcept removes the series of slots not in names (dropped).
func (m *Vacuum) ForgetSlotsExcept(names []string) {
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	for n := range m.slots {
		if !keep[n] {
			m.SlotRetainedWAL.DeleteLabelValues(n)
		}
	}
	m.slots = keep
}

// CaseEvents counts the case events a service received, by type, where
// they came from (inbox: the broker; api: typed by hand) and what became
// of them (applied, stale, malformed, refused: a signature that does not
// prove the configured producer) (retention_case_events_total, ADR-073).
type CaseEvents struct {
	Received *prometheus.CounterVec
}

// The outcomes of a case event.
const (
	CaseEventApplied   = "applied"
	CaseEventStale     = "stale"
	CaseEventMalformed = "malformed"
	CaseEventRefused   = "refused"
)

// NewCaseEvents registers the case events' counter on reg, every series
// present from zero so that a rate over a first refusal is defined.
func NewCaseEvents(reg prometheus.Registerer, types []string) (*CaseEvents, error) {
	m := &CaseEvents{Received: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "retention_case_events_total",
		Help: "Case events (case.closed, case.reopened, case.merged) received, by source (inbox, api) and outcome (applied, stale, malformed, refused).",
	}, []string{"type", "source", "outcome"})}
	if err := register(reg, m.Received); err != nil {
		return nil, err
	}
	for _, t := range types {
		for _, src := range []string{"inbox", "api"} {
			for _, o := range []string{CaseEventApplied, CaseEventStale, CaseEventMalformed, CaseEventRefused} {
				m.Received.WithLabelValues(t, src, o)
			}
		}
	}
	return m, nil
}

// Dispositions instruments what the records schedule makes due
// (ADR-073).
type Dispositions struct {
	// DueRows are the rows, hot and archived, due under each item at the
	// last computation (retention_disposition_due_rows{table,item}).
	DueRows *prometheus.GaugeVec
	// DueOldestDays is how many days the longest-waiting due case that no
	// hold keeps has been due, per table and item
	// (retention_disposition_due_oldest_days): the review is behind when
	// it grows (RetentionDispositionOverdue).
	DueOldestDays *prometheus.GaugeVec
	// ExecutedRows counts the rows, hot and archived, executed disposition
	// batches destroyed, per table and item
	// (retention_disposition_executed_rows_total).
	ExecutedRows *prometheus.CounterVec
}

// NewDispositions registers the disposition metrics on reg.
func NewDispositions(reg prometheus.Registerer) (*Dispositions, error) {
	m := &Dispositions{DueRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "retention_disposition_due_rows",
		Help: "Rows (hot and archived) due under each records schedule item at the last computation, not yet disposed.",
	}, []string{"table", "item"}), DueOldestDays: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "retention_disposition_due_oldest_days",
		Help: "Days the longest-waiting due case that no hold keeps has been due, per table and item, at the last computation.",
	}, []string{"table", "item"}), ExecutedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "retention_disposition_executed_rows_total",
		Help: "Rows (hot and archived) destroyed by executed disposition batches, per table and records schedule item.",
	}, []string{"table", "item"})}
	if err := register(reg, m.DueRows, m.DueOldestDays, m.ExecutedRows); err != nil {
		return nil, err
	}
	return m, nil
}

func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("metrics: register: %w", err)
	}
	return nil
}
