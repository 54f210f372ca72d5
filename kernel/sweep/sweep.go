// Package sweep runs sweep cycles: groups of prune policies, each group under
// its own advisory lease, with metrics and logs for every table.
//
// A service has one transport group (event_outbox THEN event_inbox, under
// lease.TransportKey) and zero or more local groups (exchange_send_jobs,
// subsidy_reconcile_queue, ...), each with a lock key of its own so a slow
// local sweep never holds up the transport sweep of another replica.
package sweep

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/prune"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Table names of the transport sweep.
const (
	OutboxTable = "event_outbox"
	InboxTable  = "event_inbox"
	// OutboxDeadLetters labels the outbox's dead-letter policy (its table
	// is OutboxTable): the sweep of the rows the drain gave up on.
	OutboxDeadLetters = "event_outbox_dead_letters"
)

// TransportGroupName names the transport group in reports and metrics.
const TransportGroupName = "transport"

// Group is a set of policies pruned in order under one lease.
type Group struct {
	// Name labels the group in logs and metrics.
	Name string
	// LockKey is the advisory lock key fencing the group's runners.
	LockKey int64
	// Policies are pruned in this order; the group stops at the first error.
	Policies []prune.Policy
}

// Enabled is false when every table of the group is disabled (window 0):
// the group never runs, never takes its lease, never succeeds.
func (g Group) Enabled() bool {
	return slices.ContainsFunc(g.Policies, func(p prune.Policy) bool { return p.WindowDays != 0 })
}

// TransportConfig holds the windows and bounds of the transport sweep.
type TransportConfig struct {
	OutboxWindowDays int
	InboxWindowDays  int
	// DeadLetterWindowDays sweeps the outbox's dead letters this many days
	// after they were dead-lettered; 0 keeps them (ADR-075).
	DeadLetterWindowDays int
	BatchSize            int
	CycleCap             int64
	// YieldToWriters sets prune.Policy.YieldToWriters on both policies.
	YieldToWriters bool
}

// Transport returns the transport group: the published-only outbox policy,
// THEN the inbox policy, then the outbox's dead letters (ADR-075: rows the
// drain gave up on, never published, aged by dead_lettered_at; disabled at
// window 0, which keeps them forever). A dead letter is never eligible for
// the published policy, and a partition holding one is never retired by it
// (its Keep, published_at IS NULL, holds for it); the dead-letter policy
// retires no partition of its own.
//
// The order is load-bearing: if the cycle fails between the
// two, the outbox is pruned and the inbox kept, so every consumer's dedup
// record still outlives the outbox rows that could be replayed. Never reorder
// them and never put both in one transaction (it would double the lock and
// WAL window).
func Transport(c TransportConfig) Group {
	return Group{
		Name:    TransportGroupName,
		LockKey: lease.TransportKey,
		Policies: []prune.Policy{
			{
				Declaration: prune.Declaration{
					Table: OutboxTable, AgeColumn: "created_at", Eligible: "published_at IS NOT NULL", Keep: "published_at IS NULL",
					Invariant: "outbox_retention_overrun", GenericPlans: true, DeleteBatch: outboxKeyset.batch,
				},
				Bounds: c.bounds(c.OutboxWindowDays),
			},
			{
				Declaration: prune.Declaration{
					Table: InboxTable, AgeColumn: "received_at", Eligible: "TRUE", Keep: "FALSE",
					Invariant: "inbox_retention_overrun", GenericPlans: true, DeleteBatch: inboxKeyset.batch,
				},
				Bounds: c.bounds(c.InboxWindowDays),
			},
			{
				Declaration: prune.Declaration{
					Table: OutboxTable, Name: OutboxDeadLetters, AgeColumn: "dead_lettered_at",
					Eligible: "published_at IS NULL AND dead_lettered_at IS NOT NULL", Keep: "published_at IS NOT NULL OR dead_lettered_at IS NULL",
					Invariant: "outbox_dead_letter_retention_overrun", GenericPlans: true, DeleteBatch: deadLetterKeyset.batch,
				},
				Bounds: prune.Bounds{WindowDays: c.DeadLetterWindowDays, BatchSize: c.BatchSize, CycleCap: c.CycleCap, YieldToWriters: c.YieldToWriters},
			},
		},
	}
}

// bounds are a transport table's bounds at its window.
func (c TransportConfig) bounds(windowDays int) prune.Bounds {
	return prune.Bounds{WindowDays: windowDays, BatchSize: c.BatchSize, CycleCap: c.CycleCap,
		YieldToWriters: c.YieldToWriters, RetirePartitions: true}
}

// keyset is one table's pair of keyset statements (queries/kernel/sweep.sql):
// the bound (the key of the limit-th eligible row after the cursor) and the
// delete of the eligible rows in (after, through].
type keyset struct {
	name  string
	bound func(ctx context.Context, q *queries.Queries, window int32, afterAt pgtype.Timestamptz, afterID pgtype.UUID, limit int32) (pgtype.Timestamptz, pgtype.UUID, error)
	del   func(ctx context.Context, q *queries.Queries, window int32, afterAt pgtype.Timestamptz, afterID pgtype.UUID, throughAt pgtype.Timestamptz, throughID pgtype.UUID, limit int32) (int64, error)
}

// batch deletes the next batch of the table's eligible rows in key order
// after the call's cursor, and advances the cursor past them.
func (k keyset) batch(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
	q, cur := queries.New(db), p.Cursor
	afterAt, afterID := keysetStart(cur)
	throughAt, throughID := keysetEnd()
	at, id, err := k.bound(ctx, q, p.WindowDays, afterAt, afterID, p.Limit)
	bounded := err == nil
	switch {
	case bounded:
		throughAt, throughID = at, id
	case !errors.Is(err, pgx.ErrNoRows): // none: fewer than Limit remain, the batch takes them all
		return 0, fmt.Errorf("%s sweep bound: %w", k.name, err)
	}
	n, err := k.del(ctx, q, p.WindowDays, afterAt, afterID, throughAt, throughID, p.Limit)
	if err != nil {
		return 0, err
	}
	if bounded {
		cur.Advance(throughAt.Time, throughID.Bytes)
	}
	return n, nil
}

// outboxKeyset deletes published outbox rows in (created_at, id) order.
// It and inboxKeyset are alike by construction: each adapts one table's
// generated statements to keyset.
//
//nolint:dupl // the two tables' sqlc adapters
var outboxKeyset = keyset{
	name: "outbox",
	bound: func(ctx context.Context, q *queries.Queries, w int32, afterAt pgtype.Timestamptz, afterID pgtype.UUID, lim int32) (pgtype.Timestamptz, pgtype.UUID, error) {
		b, err := q.OutboxSweepBound(ctx, queries.OutboxSweepBoundParams{WindowDays: w, AfterCreatedAt: afterAt, AfterID: afterID, BatchLimit: lim})
		return b.CreatedAt, b.ID, err
	},
	del: func(ctx context.Context, q *queries.Queries, w int32, afterAt pgtype.Timestamptz, afterID pgtype.UUID, throughAt pgtype.Timestamptz, throughID pgtype.UUID, lim int32) (int64, error) {
		return q.DeletePublishedOutboxBatch(ctx, queries.DeletePublishedOutboxBatchParams{
			WindowDays: w, AfterCreatedAt: afterAt, AfterID: afterID, ThroughCreatedAt: throughAt, ThroughID: throughID, BatchLimit: lim,
		})
	},
}

// deadLetterKeyset deletes the outbox's aged dead letters in
// (dead_lettered_at, id) order.
//
//nolint:dupl // the tables' sqlc adapters
var deadLetterKeyset = keyset{
	name: "outbox dead letters",
	bound: func(ctx context.Context, q *queries.Queries, w int32, afterAt pgtype.Timestamptz, afterID pgtype.UUID, lim int32) (pgtype.Timestamptz, pgtype.UUID, error) {
		b, err := q.OutboxDeadLetterSweepBound(ctx, queries.OutboxDeadLetterSweepBoundParams{WindowDays: w, AfterAt: afterAt, AfterID: afterID, BatchLimit: lim})
		return b.DeadLetteredAt, b.ID, err
	},
	del: func(ctx context.Context, q *queries.Queries, w int32, afterAt pgtype.Timestamptz, afterID pgtype.UUID, throughAt pgtype.Timestamptz, throughID pgtype.UUID, lim int32) (int64, error) {
		return q.DeleteDeadLetterOutboxBatch(ctx, queries.DeleteDeadLetterOutboxBatchParams{
			WindowDays: w, AfterAt: afterAt, AfterID: afterID, ThroughAt: throughAt, ThroughID: throughID, BatchLimit: lim,
		})
	},
}

// inboxKeyset deletes inbox rows in (received_at, event_id) order.
//
//nolint:dupl // the two tables' sqlc adapters
var inboxKeyset = keyset{
	name: "inbox",
	bound: func(ctx context.Context, q *queries.Queries, w int32, afterAt pgtype.Timestamptz, afterID pgtype.UUID, lim int32) (pgtype.Timestamptz, pgtype.UUID, error) {
		b, err := q.InboxSweepBound(ctx, queries.InboxSweepBoundParams{WindowDays: w, AfterReceivedAt: afterAt, AfterID: afterID, BatchLimit: lim})
		return b.ReceivedAt, b.EventID, err
	},
	del: func(ctx context.Context, q *queries.Queries, w int32, afterAt pgtype.Timestamptz, afterID pgtype.UUID, throughAt pgtype.Timestamptz, throughID pgtype.UUID, lim int32) (int64, error) {
		return q.DeleteInboxBatch(ctx, queries.DeleteInboxBatchParams{
			WindowDays: w, AfterReceivedAt: afterAt, AfterID: afterID, ThroughReceivedAt: throughAt, ThroughID: throughID, BatchLimit: lim,
		})
	},
}

// keysetStart is where a batch starts: after the cursor's key, or before
// every key ('-infinity', the nil uuid) when the cursor has none.
func keysetStart(c *prune.Cursor) (pgtype.Timestamptz, pgtype.UUID) {
	at, id, ok := c.Key()
	if !ok {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, pgtype.UUID{Valid: true}
	}
	return pgtype.Timestamptz{Time: at, Valid: true}, pgtype.UUID{Bytes: id, Valid: true}
}

// keysetEnd is past every key ('infinity', the max uuid): the end of the
// last batch, which takes whatever remains.
func keysetEnd() (pgtype.Timestamptz, pgtype.UUID) {
	last := pgtype.UUID{Valid: true}
	for i := range last.Bytes {
		last.Bytes[i] = 0xff
	}
	return pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}, last
}

// Bounds are the per-batch limits a service configures once for all its
// sweeps.
type Bounds struct {
	BatchSize        int
	CycleCap         int64
	StatementTimeout time.Duration
	LockTimeout      time.Duration
	// Pacing's bounds are set on every policy whose own are zero.
	Pacing prune.Pacing
}

// Apply returns the groups with every policy field that is still zero set
// from b; a policy's own non-zero value wins.
func (b Bounds) Apply(groups []Group) []Group {
	out := make([]Group, len(groups))
	for i, g := range groups {
		g.Policies = slices.Clone(g.Policies)
		for j := range g.Policies {
			p := &g.Policies[j]
			p.BatchSize = cmp.Or(p.BatchSize, b.BatchSize)
			p.CycleCap = cmp.Or(p.CycleCap, b.CycleCap)
			p.StatementTimeout = cmp.Or(p.StatementTimeout, b.StatementTimeout)
			p.LockTimeout = cmp.Or(p.LockTimeout, b.LockTimeout)
			p.Pacing.MaxReplicaLag = cmp.Or(p.Pacing.MaxReplicaLag, b.Pacing.MaxReplicaLag)
			p.Pacing.MaxWALBytesPerSecond = cmp.Or(p.Pacing.MaxWALBytesPerSecond, b.Pacing.MaxWALBytesPerSecond)
			p.Pacing.MaxPause = cmp.Or(p.Pacing.MaxPause, b.Pacing.MaxPause)
		}
		out[i] = g
	}
	return out
}

// Policies returns every policy of the groups, in sweep order.
func Policies(groups []Group) []prune.Policy {
	var out []prune.Policy
	for _, g := range groups {
		out = append(out, g.Policies...)
	}
	return out
}

// Why a table was not swept in a cycle.
const (
	SkipDisabled   = "disabled"    // its window is 0
	SkipLockHeld   = "lock_held"   // another runner holds the group's lease
	SkipNotReached = "not_reached" // an earlier table of its group failed
)

// TableReport is one table's line in a cycle report.
type TableReport struct {
	Table      string  `json:"table"`
	Group      string  `json:"group"`
	Deleted    int64   `json:"deleted"`
	Capped     bool    `json:"capped"`
	Batches    int     `json:"batches"`
	DurationMS float64 `json:"duration_ms"`
	Skipped    string  `json:"skipped,omitempty"`
	Error      string  `json:"error,omitempty"`
	// Timeouts and Reduced report batch timeouts and the fallback to the
	// reduced batch size.
	Timeouts int  `json:"timeouts,omitempty"`
	Reduced  bool `json:"reduced_batch_size,omitempty"`
	// Yielded counts batches run at the yield batch size while other
	// sessions were committing writes (prune.Policy.YieldToWriters).
	Yielded int `json:"yielded_batches,omitempty"`
	// PartitionsDropped and PartitionsKept name a range-partitioned table's
	// old partitions retired whole and kept (a row in them must stay);
	// PartitionBusy the one whose locks were not granted in time.
	PartitionsDropped []string `json:"partitions_dropped,omitempty"`
	PartitionsKept    []string `json:"partitions_kept,omitempty"`
	PartitionBusy     []string `json:"partition_busy,omitempty"`
	// PartitionsNotRetired says why a partitioned table's partitions were
	// not considered for retirement (partition_key_mismatch: it is not
	// partitioned by the policy's age column); its rows go by batches.
	PartitionsNotRetired string `json:"partitions_not_retired,omitempty"`
	// PausedSeconds is how long the table's prune waited, per reason
	// (replica_lag, wal_rate: prune.Pacing); PauseExhausted names the reason
	// its pause budget ran out, ending it early (the rest waits for the
	// next cycle).
	PausedSeconds  map[string]float64 `json:"paused_seconds,omitempty"`
	PauseExhausted string             `json:"pause_exhausted,omitempty"`
	// DryRunTable is set only in a dry-run report.
	*DryRunTable
}

// DryRunTable is what a dry run adds to a table's line: what a real run
// would delete now. Deleted is 0, Batches is what a real run would take and
// Capped whether it would stop at the cycle cap.
type DryRunTable struct {
	Eligible                 int64    `json:"eligible"`
	OldestEligibleAgeSeconds *float64 `json:"oldest_eligible_age_seconds"`
	// PartitionsToDrop and PartitionsToKeep: a range-partitioned table's
	// old partitions a real run would retire whole, and keep.
	PartitionsToDrop []string `json:"partitions_to_drop,omitempty"`
	PartitionsToKeep []string `json:"partitions_to_keep,omitempty"`
}

// Report is the outcome of one cycle.
type Report struct {
	// LockAcquired is false when any group was skipped because another
	// runner held its lease.
	LockAcquired bool `json:"lock_acquired"`
	// DryRun is true for a report of what a cycle would do; nothing was
	// deleted and no lease was held.
	DryRun bool `json:"dry_run,omitempty"`
	// Tables has one entry per registered table, in sweep order.
	Tables []TableReport `json:"tables"`
}

// Deleted is the total number of rows the cycle deleted.
func (r Report) Deleted() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Deleted
	}
	return n
}

// Sweeper runs sweep cycles over a fixed set of groups.
type Sweeper struct {
	pool    *pgxpool.Pool
	groups  []Group
	logger  *slog.Logger
	metrics *metrics.Prune
	hook    GroupHook
}

// GroupHook runs after each group of a cycle. When this runner held the
// group's lease and ran it (to the end or to an error), ran is true and the
// hook runs still under the lease, on its connection db: a check there (the
// watchdogs) sees the tables as this sweep left them, and no other replica
// can be mid-drain. Otherwise (another runner held the lease, the lease
// could not be taken, or every table of the group is disabled) ran is false
// and db is nil: this runner knows nothing current about the tables.
type GroupHook func(ctx context.Context, db prune.DB, g Group, ran bool)

// WithGroupHook returns a copy of the sweeper that calls h after each group.
func (s *Sweeper) WithGroupHook(h GroupHook) *Sweeper {
	c := *s
	c.hook = h
	return &c
}

// ErrInvalidGroups is returned (wrapped) by New for an unusable group set.
var ErrInvalidGroups = errors.New("sweep: invalid groups")

// New validates the groups and returns a Sweeper. Table names and lock keys
// must be unique across groups.
func New(pool *pgxpool.Pool, groups []Group, logger *slog.Logger, m *metrics.Prune) (*Sweeper, error) {
	if pool == nil || logger == nil || m == nil {
		return nil, fmt.Errorf("%w: pool, logger and metrics are required", ErrInvalidGroups)
	}
	// Cutoffs are now() - N days in the session's zone: only on sessions
	// pinned to UTC is that N × 24 hours (a DST zone moves it by an hour).
	if err := pgsession.CheckPinned(pool); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidGroups, err)
	}
	tables, labels, keys := map[string]string{}, map[string]bool{}, map[int64]string{}
	for _, g := range groups {
		if g.Name == "" || len(g.Policies) == 0 {
			return nil, fmt.Errorf("%w: group %q needs a name and at least one policy", ErrInvalidGroups, g.Name)
		}
		if other, dup := keys[g.LockKey]; dup {
			return nil, fmt.Errorf("%w: groups %q and %q share lock key %#x", ErrInvalidGroups, other, g.Name, g.LockKey)
		}
		keys[g.LockKey] = g.Name
		for _, p := range g.Policies {
			if err := p.Validate(); err != nil {
				return nil, fmt.Errorf("%w: group %q: %w", ErrInvalidGroups, g.Name, err)
			}
			// A table's policies share one group (one lease, so two
			// replicas never prune it at once); each has its own label.
			if other, ok := tables[p.Table]; (ok && other != g.Name) || labels[p.Label()] {
				return nil, fmt.Errorf("%w: table %q registered twice", ErrInvalidGroups, p.Label())
			}
			tables[p.Table], labels[p.Label()] = g.Name, true
		}
	}
	return &Sweeper{pool: pool, groups: groups, logger: logger, metrics: m}, nil
}

// Groups returns the sweeper's groups.
func (s *Sweeper) Groups() []Group { return s.groups }

// RunOnce runs one cycle: every group in order, each under its own lease.
// A group whose lease is held elsewhere is skipped without blocking. An error
// in one group stops that group only; the errors of all groups are joined.
func (s *Sweeper) RunOnce(ctx context.Context) (Report, error) {
	rep := Report{LockAcquired: true}
	var errs []error
	for _, g := range s.groups {
		tables, acquired, err := s.runGroup(ctx, g)
		rep.Tables = append(rep.Tables, tables...)
		if !acquired {
			rep.LockAcquired = false
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return rep, errors.Join(errs...)
}

// runGroup runs one group under its lease: its enabled tables in order,
// stopping at the first failure. acquired is false when another runner
// held the lease.
func (s *Sweeper) runGroup(ctx context.Context, g Group) (out []TableReport, acquired bool, err error) {
	out, enabled := s.groupReport(g)
	if !enabled {
		s.callHook(ctx, nil, g, false)
		return out, true, nil // nothing to do: do not even take the lease
	}
	ran := false
	defer func() {
		if !ran {
			s.callHook(ctx, nil, g, false)
		}
	}()
	acquired, err = lease.TryRun(ctx, s.pool, g.LockKey, func(ctx context.Context, conn *pgx.Conn) error {
		ran = true
		defer s.callHook(ctx, conn, g, true)
		return s.pruneGroup(ctx, conn, g, out)
	})
	switch {
	case err != nil && !acquired:
		err = fmt.Errorf("sweep group %s: %w", g.Name, err)
		markSkipped(out, SkipNotReached, err.Error())
		s.logError(ctx, "sweep group could not start", err, slog.String("group", g.Name))
		return out, true, err
	case !acquired:
		markSkipped(out, SkipLockHeld, "")
		s.metrics.LockSkipped.WithLabelValues(g.Name).Inc()
		s.logger.DebugContext(ctx, "sweep group skipped: lease held by another runner", slog.String("group", g.Name))
		return out, false, nil
	case err != nil:
		return out, true, fmt.Errorf("sweep group %s: %w", g.Name, err)
	}
	s.metrics.LastSuccess.WithLabelValues(g.Name).SetToCurrentTime()
	return out, true, nil
}

// groupReport is the group's report before it runs: a line per table, the
// disabled ones skipped (their backlog gauge 0); enabled is false when every
// table is disabled.
func (s *Sweeper) groupReport(g Group) (out []TableReport, enabled bool) {
	out = make([]TableReport, len(g.Policies))
	for i, p := range g.Policies {
		out[i] = TableReport{Table: p.Label(), Group: g.Name}
		if p.WindowDays == 0 {
			out[i].Skipped = SkipDisabled
			s.metrics.OldestEligibleAge.WithLabelValues(p.Label()).Set(0)
		} else {
			enabled = true
		}
	}
	return out, enabled
}

// pruneGroup prunes the group's enabled tables in order on the lease's
// connection, recording each in out; after a failure the rest are
// not_reached.
func (s *Sweeper) pruneGroup(ctx context.Context, conn *pgx.Conn, g Group, out []TableReport) error {
	for i, p := range g.Policies {
		if p.WindowDays == 0 {
			continue
		}
		table := p.Label()
		p.Pacing.Paused = func(reason string, d time.Duration) {
			s.metrics.Paused.WithLabelValues(table, reason).Add(d.Seconds())
		}
		r, err := prune.PruneTable(ctx, conn, p)
		s.record(g, &out[i], r, err)
		s.recordPacing(&out[i], r)
		if err != nil {
			markSkipped(out[i+1:], SkipNotReached, "")
			return err
		}
		s.observeBacklog(ctx, conn, p)
	}
	return nil
}

// markSkipped marks every line not yet skipped as skipped for why, with
// errText as its error when set.
func markSkipped(out []TableReport, why, errText string) {
	for i := range out {
		if out[i].Skipped == "" {
			out[i].Skipped = why
			if errText != "" {
				out[i].Error = errText
			}
		}
	}
}

func (s *Sweeper) callHook(ctx context.Context, db prune.DB, g Group, swept bool) {
	if s.hook != nil {
		s.hook(ctx, db, g, swept)
	}
}

// observeBacklog sets the backlog gauge to the age of the oldest row still
// eligible after the prune (0 when none; capped or racing inserts leave
// some).
func (s *Sweeper) observeBacklog(ctx context.Context, db prune.DB, p prune.Policy) {
	if p.Inspectable() != nil {
		return
	}
	age, err := prune.OldestEligibleAge(ctx, db, p)
	if err != nil {
		s.logError(ctx, "backlog gauge not updated", err, slog.String("table", p.Label()))
		return
	}
	s.metrics.OldestEligibleAge.WithLabelValues(p.Label()).Set(age.Seconds())
}

// DryRun reports what a cycle would do now without deleting anything: per
// table the eligible rows, the oldest eligible row's age and the batches a
// real run would take. It never takes a lease, not even for a moment (a
// real sweep that found it taken would skip its cycle): LockAcquired says
// whether every group's lease was free, read from pg_locks.
func (s *Sweeper) DryRun(ctx context.Context) (Report, error) {
	rep := Report{LockAcquired: true, DryRun: true}
	for _, g := range s.groups {
		enabled := slices.ContainsFunc(g.Policies, func(p prune.Policy) bool { return p.WindowDays > 0 })
		if enabled {
			held, err := lease.Held(ctx, s.pool, g.LockKey)
			if err != nil {
				return rep, fmt.Errorf("sweep dry run: lease of %s: %w", g.Name, err)
			}
			rep.LockAcquired = rep.LockAcquired && !held
		}
		for _, p := range g.Policies {
			tr := TableReport{Table: p.Label(), Group: g.Name}
			if p.WindowDays == 0 {
				tr.Skipped = SkipDisabled
				rep.Tables = append(rep.Tables, tr)
				continue
			}
			plan, err := prune.Plan(ctx, s.pool, p)
			if err != nil {
				return rep, fmt.Errorf("sweep dry run: %w", err)
			}
			tr.Batches, tr.Capped, tr.PartitionsNotRetired = int(plan.Batches), plan.WouldCap, plan.NotRetired
			tr.DryRunTable = &DryRunTable{Eligible: plan.Count, OldestEligibleAgeSeconds: plan.OldestAgeSeconds(),
				PartitionsToDrop: plan.PartitionsToDrop, PartitionsToKeep: plan.PartitionsToKeep}
			rep.Tables = append(rep.Tables, tr)
		}
	}
	return rep, nil
}

func (s *Sweeper) record(g Group, tr *TableReport, r prune.Report, err error) {
	tr.Deleted, tr.Capped, tr.Batches, tr.Timeouts, tr.Reduced = r.Deleted, r.Capped, r.Batches, r.Timeouts, r.Reduced
	tr.Yielded = r.Yielded
	tr.PartitionsDropped, tr.PartitionsKept, tr.PartitionBusy = r.Partitions.Dropped, r.Partitions.Kept, r.Partitions.Busy
	tr.PartitionsNotRetired = r.Partitions.NotRetired
	tr.DurationMS = float64(r.Duration.Microseconds()) / 1000
	s.metrics.RowsPruned.WithLabelValues(r.Table).Add(float64(r.Deleted))
	s.metrics.PartitionsDropped.WithLabelValues(r.Table).Add(float64(len(r.Partitions.Dropped)))
	s.metrics.PartitionsKept.WithLabelValues(r.Table).Add(float64(len(r.Partitions.Kept)))
	if len(r.Partitions.Dropped)+len(r.Partitions.Kept)+len(r.Partitions.Reattached) > 0 {
		s.logger.Info("retention retired old partitions", slog.String("table", r.Table), slog.Any("dropped", r.Partitions.Dropped),
			slog.Int64("dropped_rows", r.Partitions.DroppedRows), slog.Any("kept_holding_rows_that_must_stay", r.Partitions.Kept),
			slog.Any("attached_again_younger_than_the_window", r.Partitions.Reattached))
	}
	for _, f := range r.Partitions.Failed {
		s.logger.Error("retention could not drop a detached partition: attached again where its bounds are known", slog.String("table", r.Table),
			slog.String("partition", f.Partition), slog.Any("error", f.Err))
	}
	s.metrics.Duration.WithLabelValues(r.Table).Observe(r.Duration.Seconds())
	attrs := []any{
		slog.String("group", g.Name), slog.String("table", r.Table),
		slog.Int64("deleted", r.Deleted), slog.Int("batches", r.Batches), slog.Int("yielded_batches", r.Yielded),
		slog.Float64("duration_ms", float64(r.Duration.Microseconds())/1000),
	}
	s.metrics.BatchTimeouts.WithLabelValues(r.Table).Add(float64(r.Timeouts))
	s.metrics.BatchYielded.WithLabelValues(r.Table).Add(float64(r.Yielded))
	if r.Reduced {
		s.metrics.BatchReduced.WithLabelValues(r.Table).Inc()
		s.logger.Warn("retention prune fell back to the reduced batch size after consecutive batch timeouts",
			append(attrs, slog.Int("timeouts", r.Timeouts), slog.Int("consecutive_timeouts", prune.MaxConsecutiveTimeouts))...)
	}
	if err != nil {
		tr.Error = err.Error()
		s.metrics.Failures.WithLabelValues(r.Table).Inc()
		s.logError(context.Background(), "retention prune failed", err, attrs...)
		return
	}
	if r.Capped {
		s.metrics.Capped.WithLabelValues(r.Table).Inc()
		s.logger.Warn("retention prune stopped at the cycle cap: possible clock jump or backlog; rows may remain",
			append(attrs, slog.Int64("cycle_cap", capOf(g, r.Table)))...)
		return
	}
	if r.Deleted > 0 {
		s.logger.Info("retention prune deleted rows", attrs...)
	}
}

// recordPacing reports a table's pauses, and warns when its pause budget
// ran out or a replica's lag was hidden from the role.
func (s *Sweeper) recordPacing(tr *TableReport, r prune.Report) {
	for reason, d := range map[string]time.Duration{prune.PauseReplicaLag: r.PausedReplicaLag, prune.PauseWALRate: r.PausedWALRate} {
		if d > 0 {
			if tr.PausedSeconds == nil {
				tr.PausedSeconds = map[string]float64{}
			}
			tr.PausedSeconds[reason] = d.Seconds()
		}
	}
	tr.PauseExhausted = r.PauseExhausted
	attrs := []any{slog.String("table", r.Table), slog.Duration("paused_replica_lag", r.PausedReplicaLag),
		slog.Duration("paused_wal_rate", r.PausedWALRate), slog.Duration("max_replica_lag_seen", r.MaxReplicaLagSeen)}
	switch {
	case r.PauseExhausted != "":
		s.logger.Warn("retention prune paused until its pause budget ran out: the rest waits for the next cycle",
			append(attrs, slog.String("reason", r.PauseExhausted), slog.Int64("deleted", r.Deleted))...)
	case r.PausedReplicaLag+r.PausedWALRate > 0:
		s.logger.Info("retention prune paused to protect the database", attrs...)
	}
	if r.ReplicaLagUnreadable {
		s.logger.Warn("retention prune cannot read a replica's lag: grant the service's role pg_monitor (or pg_read_all_stats), or set prune_max_replica_lag=0",
			slog.String("table", r.Table))
	}
}

func (s *Sweeper) logError(ctx context.Context, msg string, err error, attrs ...any) {
	if errors.Is(err, context.Canceled) {
		s.logger.DebugContext(ctx, msg+" (cancelled)", attrs...)
		return
	}
	s.logger.ErrorContext(ctx, msg, append(attrs, slog.Any("error", err))...)
}

func capOf(g Group, table string) int64 {
	for _, p := range g.Policies {
		if p.Label() == table {
			if p.CycleCap == 0 {
				return prune.DefaultCycleCap
			}
			return p.CycleCap
		}
	}
	return 0
}
