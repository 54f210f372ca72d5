package prune

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Partition retirement: a swept table range-partitioned by its
// age column retires each partition whose upper bound is at or before the
// cutoff as a whole — if, and only if, no row in it fails the policy's
// eligibility predicate, checked under a lock that no write can pass. A
// partition holding a row that must be kept (a pending outbox row) is kept
// and its eligible rows go by the ordinary batch loop; so does the boundary
// partition that straddles the cutoff.
const (
	// DefaultMaxPartitions bounds the partitions one PruneTable call drops:
	// a week of daily partitions. A clock that jumps a month must not drop
	// a month of partitions in one cycle, whatever their rows.
	DefaultMaxPartitions = 7
	// MaxMaxPartitions bounds the bound: a year of daily partitions.
	MaxMaxPartitions = 366
	// DefaultPartitionLockTimeout bounds how long a retirement waits for
	// its ACCESS EXCLUSIVE locks: while it waits, writers of the table queue
	// behind it, so it gives up quickly and retries next cycle rather than
	// stall the service's inserts.
	DefaultPartitionLockTimeout = 200 * time.Millisecond
)

// PartitionReport is what a retirement did.
type PartitionReport struct {
	// Dropped are the partitions detached and dropped, oldest first, and
	// DroppedRows the rows they held when they were retired from the table,
	// counted under the lock that checked them (the seal keeps any row from
	// being added before the drop; rows deleted from a detached table by
	// name, by someone else, still count: they left the table with it).
	Dropped     []string
	DroppedRows int64
	// Kept are the old partitions holding a row that must be kept (their
	// eligible rows go by the batch loop). A detached partition found, at
	// its drop, to hold such a row (written into it by name after the
	// detach) is attached again and named here too.
	Kept []string
	// Busy is the old partition whose locks were not granted within the
	// lock timeout: the retirement stops there for this cycle (each further
	// attempt would make the table's writers wait again) and retries next
	// cycle.
	Busy []string
	// Reattached are detached tables found younger than the cutoff (the
	// window widened since a call detached them and left their drop
	// undone): attached again, their rows back in the service's sight.
	Reattached []string
	// Failed are the detached partitions whose DROP failed for a reason
	// other than a busy lock (a dependent view, say): each is attached
	// again where its bounds are known (its rows back in the service's
	// sight, for the batch loop) and the retirement goes on with the
	// others; the error says why.
	Failed []PartitionFailure
	// Capped is true when the partition cap stopped the retirement with
	// old partitions left (the call then ends there: the batch loop must
	// not delete, row by row, rows the next call drops whole).
	Capped bool
	// NotRetired says why a partitioned table's partitions were not
	// considered for retirement at all (NotRetiredKeyMismatch); its old
	// rows then go by batches.
	NotRetired string
}

// PartitionFailure is a partition retirement could not drop, and why.
type PartitionFailure struct {
	Partition string
	Err       error
}

// NotRetiredKeyMismatch: the table is partitioned, but not by a single
// range key that is the policy's age column (timestamptz). A partition's
// bounds then say nothing about its rows' ages (a table partitioned by
// created_at and swept by completed_at holds, in its old partitions, rows
// completed yesterday), so no partition is dropped whole.
const NotRetiredKeyMismatch = "partition_key_mismatch"

// partitionKeyMatches is true when the table's partition key is one range
// key column, the named age column, of type timestamptz (the only type
// whose bounds the kernel compares). Kernel-built catalog SQL; table and
// column are parameters.
const partitionKeyMatches = `
SELECT coalesce((
    SELECT pt.partstrat = 'r' AND pt.partnatts = 1 AND a.attname = $2::name
           AND a.atttypid = 'pg_catalog.timestamptz'::pg_catalog.regtype
    FROM pg_catalog.pg_partitioned_table pt
    JOIN pg_catalog.pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
    WHERE pt.partrelid = to_regclass($1)), false)`

// partitionsOf lists the range partitions of a partitioned table whose
// upper bound is at or before now() - window days, oldest first, with its
// bounds (lower NULL: MINVALUE; the default partition and MAXVALUE upper
// bounds are never listed). It
// is kernel-built catalog SQL: the table is a parameter, never text.
// PostgreSQL gives a partition's bound only as the text pg_get_expr
// renders; it is cast back to timestamptz in the same statement, and the
// statement runs in a transaction whose TimeZone and DateStyle are pinned
// (boundSettings), so the text is rendered and read back alike whatever the
// session's settings, and only the typed bound leaves the server.
const partitionsOf = `
SELECT n.nspname, c.relname, b.lower, b.upper
FROM pg_catalog.pg_inherits i
JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL (SELECT pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS expr) e
CROSS JOIN LATERAL (SELECT (regexp_match(e.expr, 'TO \(''([^'']+)''\)'))[1]::timestamptz AS upper,
                           (regexp_match(e.expr, 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lower) b
WHERE i.inhparent = to_regclass($1)
  AND c.relkind = 'r'
  AND b.upper IS NOT NULL
  AND b.upper <= now() - make_interval(days => $2::int)
ORDER BY b.upper`

// isPartitioned reports whether the table is a partitioned table.
const isPartitioned = `SELECT coalesce((SELECT relkind = 'p' FROM pg_catalog.pg_class WHERE oid = to_regclass($1)), false)`

type oldPartition struct {
	schema, name string
	// lower is nil for MINVALUE; boundKnown is false for a detached table
	// recorded before its lower bound was (transport migration 00008).
	lower      *time.Time
	upper      time.Time
	boundKnown bool
}

func (o oldPartition) ident() string { return pgx.Identifier{o.schema, o.name}.Sanitize() }

// Partitioned reports whether the policy's table is range-partitioned
// (from the catalog: no setting says so).
func (p Policy) Partitioned(ctx context.Context, db DB) (bool, error) {
	var yes bool
	if err := db.QueryRow(ctx, isPartitioned, p.Table).Scan(&yes); err != nil {
		return false, fmt.Errorf("prune %s: is it partitioned: %w", p.Table, err)
	}
	return yes, nil
}

// Retire retires the policy's old partitions (see the package
// constants), at most maxPartitions (0: DefaultMaxPartitions) and rowCap
// rows (0: no cap of its own) per call. Each retirement is one
// transaction: ACCESS EXCLUSIVE on the partition (no write reaches its
// rows until the transaction ends: a replay that would make a row
// ineligible waits, or holds it first and makes the lock wait), the
// predicate checked over every row, then DETACH and DROP; a lock not
// granted within lockTimeout (0: DefaultPartitionLockTimeout) leaves the
// partition for the next cycle. A table that is not partitioned is a no-op.
func (p Policy) Retire(ctx context.Context, db DB, maxPartitions int, rowCap int64, lockTimeout time.Duration) (PartitionReport, error) {
	var rep PartitionReport
	if err := p.checkPartitionArgs(maxPartitions, lockTimeout); err != nil || p.WindowDays == 0 {
		return rep, err
	}
	if maxPartitions == 0 {
		maxPartitions = DefaultMaxPartitions
	}
	if lockTimeout == 0 {
		lockTimeout = DefaultPartitionLockTimeout
	}
	if yes, err := p.Partitioned(ctx, db); err != nil || !yes {
		return rep, err
	}
	if err := p.premake(ctx, db, lockTimeout); err != nil {
		return rep, err
	}
	run := &retireRun{p: p, db: db, lockTimeout: lockTimeout, maxPartitions: maxPartitions, rowCap: rowCap, rep: &rep}
	if err := run.dropStranded(ctx); err != nil {
		return rep, err
	}
	olds, notRetired, err := p.oldPartitions(ctx, db)
	if err != nil {
		return rep, err
	}
	rep.NotRetired = notRetired
	return rep, run.retireOld(ctx, olds)
}

// premakeDue reports whether pg_partman manages the table and has fewer
// partitions made ahead than its premake asks for (the newest partition
// ends before now() + premake days): then premake lets pg_partman make them
// (its own retention stays off: retiring is the kernel's). Once a day in
// practice; the other cycles pay one catalog read, not pg_partman's
// maintenance (85 ms measured on a cold 64-partition outbox). Kernel-built
// SQL; the table is a parameter.
const premakeDue = `
SELECT coalesce((
    SELECT coalesce(max(b.upper) < now() + make_interval(days => pc.premake), true)
    FROM partman.part_config pc
    LEFT JOIN pg_catalog.pg_inherits i ON i.inhparent = to_regclass($1)
    LEFT JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
    LEFT JOIN LATERAL (SELECT (regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS upper) b ON true
    WHERE pc.parent_table = 'public.' || $1::text
    GROUP BY pc.premake), false)`

// premake runs pg_partman's maintenance for the table when it is due (see
// premakeDue), within the lock timeout; a lock not granted is left for the
// next cycle (a week of partitions is made ahead).
func (p Policy) premake(ctx context.Context, db DB, lockTimeout time.Duration) error {
	// Two statements: the second names partman.part_config, which does not
	// parse where pg_partman is not installed.
	var due bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('partman.part_config') IS NOT NULL`).Scan(&due); err != nil || !due {
		return err
	}
	if err := db.QueryRow(ctx, premakeDue, p.Table).Scan(&due); err != nil || !due {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("prune %s: partition maintenance: %w", p.Table, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", serverMillis(lockTimeout)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT partman.run_maintenance('public.' || $1::text, p_jobmon := false)", p.Table); err != nil {
		if _, _, lerr := lockOutcome(p, oldPartition{name: "maintenance"}, err); lerr == nil {
			return nil // busy: next cycle
		}
		return fmt.Errorf("prune %s: pg_partman maintenance: %w", p.Table, err)
	}
	return tx.Commit(ctx)
}

func (p Policy) checkPartitionArgs(maxPartitions int, lockTimeout time.Duration) error {
	switch {
	case maxPartitions < 0 || maxPartitions > MaxMaxPartitions:
		return fmt.Errorf("%w: %s: partitions per cycle %d outside 0..%d", ErrInvalidPolicy, p.Table, maxPartitions, MaxMaxPartitions)
	case lockTimeout < 0:
		return fmt.Errorf("%w: %s: negative partition lock timeout", ErrInvalidPolicy, p.Table)
	case p.Eligible == "" || p.AgeColumn == "":
		return fmt.Errorf("%w: %s: partition retirement needs Eligible and AgeColumn", ErrInvalidPolicy, p.Table)
	}
	return nil
}

// boundSettings pins, for one transaction, the settings a bound's text
// depends on (see partitionsOf).
const boundSettings = `SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, YMD', true), set_config('timezone_abbreviations', 'Default', true)`

// oldPartitions lists the partitions a retirement may consider, oldest
// first; none, with the reason, when the table is not partitioned by the
// policy's age column (NotRetiredKeyMismatch).
func (p Policy) oldPartitions(ctx context.Context, db DB) (olds []oldPartition, notRetired string, err error) {
	window, err := toInt32(int64(p.WindowDays))
	if err != nil {
		return nil, "", err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var match bool
		if err := tx.QueryRow(ctx, partitionKeyMatches, p.Table, p.AgeColumn).Scan(&match); err != nil {
			return fmt.Errorf("partition key: %w", err)
		}
		if !match {
			notRetired = NotRetiredKeyMismatch
			return nil
		}
		if _, err := tx.Exec(ctx, boundSettings); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, partitionsOf, p.Table, window)
		if err != nil {
			return err
		}
		olds, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (oldPartition, error) {
			o := oldPartition{boundKnown: true}
			return o, row.Scan(&o.schema, &o.name, &o.lower, &o.upper)
		})
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("prune %s: list partitions: %w", p.Table, err)
	}
	return olds, notRetired, nil
}
