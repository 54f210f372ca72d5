package prune

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// DroppedRows the rows they held, as the catalog counts them
	// (pg_class.reltuples, as VACUUM or ANALYZE last left it: exact for a
	// partition VACUUM has read whole and nothing has written since, which
	// an old partition usually is; counted row by row where neither has
	// seen the partition). The drop itself never depends on it: the keep
	// check does.
	Dropped     []string
	DroppedRows int64
	// Kept are the old partitions holding a row that must be kept (their
	// eligible rows go by the batch loop).
	Kept []string
	// Busy is the old partition whose locks were not granted within the
	// lock timeout: the retirement stops there for this cycle (each further
	// attempt would make the table's writers wait again) and retries next
	// cycle.
	Busy []string
	// Capped is true when the partition cap stopped the retirement with
	// old partitions left (the call then ends there: the batch loop must
	// not delete, row by row, rows the next call drops whole).
	Capped bool
	// NotRetired says why a partitioned table's partitions were not
	// considered for retirement at all (NotRetiredKeyMismatch); its old
	// rows then go by batches.
	NotRetired string
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
// upper bound is at or before now() - window days, oldest first, with the
// bound (the default partition and MAXVALUE bounds are never listed). It
// is kernel-built catalog SQL: the table is a parameter, never text.
// PostgreSQL gives a partition's bound only as the text pg_get_expr
// renders; it is cast back to timestamptz in the same statement, and the
// statement runs in a transaction whose TimeZone and DateStyle are pinned
// (boundSettings), so the text is rendered and read back alike whatever the
// session's settings, and only the typed bound leaves the server.
const partitionsOf = `
SELECT n.nspname, c.relname, b.upper
FROM pg_catalog.pg_inherits i
JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL (SELECT (regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS upper) b
WHERE i.inhparent = to_regclass($1)
  AND c.relkind = 'r'
  AND b.upper IS NOT NULL
  AND b.upper <= now() - make_interval(days => $2::int)
ORDER BY b.upper`

// isPartitioned reports whether the table is a partitioned table.
const isPartitioned = `SELECT coalesce((SELECT relkind = 'p' FROM pg_catalog.pg_class WHERE oid = to_regclass($1)), false)`

type oldPartition struct {
	schema, name string
	upper        time.Time
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
	if err := p.dropStranded(ctx, db, lockTimeout, &rep); err != nil {
		return rep, err
	}
	olds, notRetired, err := p.oldPartitions(ctx, db)
	if err != nil {
		return rep, err
	}
	rep.NotRetired = notRetired
	for _, o := range olds {
		if len(rep.Dropped) >= maxPartitions {
			rep.Capped = true
			break
		}
		outcome, rows, err := p.retire(ctx, db, o, lockTimeout, rowCap-rep.DroppedRows, rowCap > 0)
		switch {
		case err != nil:
			return rep, err
		case outcome == retiredDropped:
			rep.Dropped, rep.DroppedRows = append(rep.Dropped, o.name), rep.DroppedRows+rows
		case outcome == retiredKept:
			rep.Kept = append(rep.Kept, o.name)
		case outcome == retiredBusy:
			// Another session holds the table: every further attempt this
			// cycle would queue the writers behind it again. Next cycle.
			rep.Busy = append(rep.Busy, o.name)
			return rep, nil
		case outcome == retiredCapped:
			// Over the row cap: the batch loop takes its rows, within the
			// cap, so a partition larger than the cap still goes.
			return rep, nil
		}
	}
	return rep, nil
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
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(lockTimeout.Milliseconds(), 10)); err != nil {
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
			var o oldPartition
			return o, row.Scan(&o.schema, &o.name, &o.upper)
		})
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("prune %s: list partitions: %w", p.Table, err)
	}
	return olds, notRetired, nil
}

type retirement int

const (
	retiredDropped retirement = iota
	retiredKept
	retiredBusy
	retiredCapped
)

// retire is one partition's retirement: the detach transaction, then the
// drop. The detach transaction holds ACCESS EXCLUSIVE on the partition
// (no write reaches its rows until it ends: a replay that would make a row
// ineligible waits, or holds the partition first and makes the lock wait),
// checks that no row must stay, and DETACHes it — which holds the parent,
// and so the service's writers, until it commits: that is all it does
// there. It commits asynchronously (no WAL flush for the writers to wait
// behind; a crash that loses the commit leaves the partition attached,
// whole). The drop, whose commit unlinks the files and must flush, runs in
// its own transaction on the detached table, which no writer of the parent
// reaches; the detach marks the table (its comment) so that a drop lost to
// a crash is finished by the next call (dropStranded).
func (p Policy) retire(ctx context.Context, db DB, o oldPartition, lockTimeout time.Duration, rowsLeft int64, capped bool) (retirement, int64, error) {
	outcome, rows, err := p.detach(ctx, db, o, lockTimeout, rowsLeft, capped)
	if err != nil || outcome != retiredDropped {
		return outcome, rows, err
	}
	if outcome, _, err = p.dropDetached(ctx, db, o, lockTimeout); err != nil {
		return 0, 0, err
	}
	return outcome, rows, nil
}

// detach is the detach transaction (see retire), asynchronously committed.
func (p Policy) detach(ctx context.Context, db DB, o oldPartition, lockTimeout time.Duration, rowsLeft int64, capped bool) (retirement, int64, error) {
	return p.underLock(ctx, db, o, lockTimeout, true, "retire", func(tx pgx.Tx, rows int64) (retirement, error) {
		if capped && rows > rowsLeft {
			return retiredCapped, nil
		}
		parent := pgx.Identifier{p.Table}.Sanitize()
		if _, err := tx.Exec(ctx, "ALTER TABLE "+parent+" DETACH PARTITION "+o.ident()); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == sqlStateLockNotAvailable {
				return retiredBusy, nil // the parent's lock was not granted in time
			}
			return 0, fmt.Errorf("detach: %w", err)
		}
		if _, err := tx.Exec(ctx, "COMMENT ON TABLE "+o.ident()+" IS "+p.detachedMark()); err != nil {
			return 0, fmt.Errorf("mark: %w", err)
		}
		if _, err := tx.Exec(ctx, recordDetached, o.ident(), o.schema, o.name, p.Table, o.upper); err != nil {
			return 0, fmt.Errorf("record detached: %w", err)
		}
		return retiredDropped, nil
	})
}

// underLock runs one retirement step in its own transaction: the lock
// timeout (and an asynchronous commit when async), ACCESS EXCLUSIVE on the
// table (the partition first, then — DETACH — the parent: the order
// writers of the parent take them in), the keep check, the table's rows
// from the catalog, then step; it commits when step says retiredDropped.
func (p Policy) underLock(ctx context.Context, db DB, o oldPartition, lockTimeout time.Duration, async bool, what string,
	step func(pgx.Tx, int64) (retirement, error)) (retirement, int64, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("prune %s: %s %s: begin: %w", p.Table, what, o.name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	commit := "on"
	if async {
		commit = "off"
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), set_config('synchronous_commit', $2, true)",
		strconv.FormatInt(lockTimeout.Milliseconds(), 10), commit); err != nil {
		return 0, 0, fmt.Errorf("prune %s: %s %s: %w", p.Table, what, o.name, err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+o.ident()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return lockOutcome(p, o, err)
	}
	if keep, err := p.holdsKeep(ctx, tx, o); err != nil || keep {
		return retiredKept, 0, err
	}
	rows, err := partitionRows(ctx, tx, o)
	if err != nil {
		return 0, 0, fmt.Errorf("prune %s: %s %s: rows: %w", p.Table, what, o.name, err)
	}
	outcome, err := step(tx, rows)
	if err != nil || outcome != retiredDropped {
		if err != nil {
			err = fmt.Errorf("prune %s: %s %s: %w", p.Table, what, o.name, err)
		}
		return outcome, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("prune %s: %s %s: commit: %w", p.Table, what, o.name, err)
	}
	return retiredDropped, rows, nil
}

// holdsKeep reports whether a row of the partition must stay. Keep (or its
// slow form) is the policy's reviewed SQL, never input; an index answers
// Keep.
func (p Policy) holdsKeep(ctx context.Context, tx pgx.Tx, o oldPartition) (bool, error) {
	var keep bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+o.ident()+" WHERE "+p.keepPredicate()+")").Scan(&keep); err != nil {
		return false, fmt.Errorf("prune %s: retire %s: check: %w", p.Table, o.name, err)
	}
	return keep, nil
}

// detachedMark is the comment the detach transaction leaves on a table it
// detached for dropping, as an SQL literal (the table name is the policy's
// code, its quotes doubled all the same).
func (p Policy) detachedMark() string {
	return "'" + strings.ReplaceAll(detachedMarkPrefix+p.Table, "'", "''") + "'"
}

// detachedMarkPrefix begins the mark; the policy's table name ends it.
const detachedMarkPrefix = "craig-retention: detached from "

// dropDetached drops a table the detach transaction detached, after
// checking once more, under ACCESS EXCLUSIVE, that no row must stay (no
// writer of the parent reaches it; one writing to it by name would have to
// name it). A table that does hold such a row is left, named in Kept.
func (p Policy) dropDetached(ctx context.Context, db DB, o oldPartition, lockTimeout time.Duration) (retirement, int64, error) {
	return p.underLock(ctx, db, o, lockTimeout, false, "drop", func(tx pgx.Tx, _ int64) (retirement, error) {
		if _, err := tx.Exec(ctx, forgetDetached, p.Table, o.schema, o.name); err != nil {
			return 0, err
		}
		if _, err := tx.Exec(ctx, "DROP TABLE "+o.ident()); err != nil {
			return 0, err
		}
		return retiredDropped, nil
	})
}

// Kernel-built SQL of the detached-partition record (transport migration
// 00005): the detach transaction records what it detached, the drop's
// transaction forgets it. Every value is a parameter.
const (
	recordDetached = `INSERT INTO retention_detached_partitions (table_oid, schema_name, table_name, parent, upper_bound)
VALUES (to_regclass($1)::oid, $2, $3, $4, $5)`
	forgetDetached = `DELETE FROM retention_detached_partitions WHERE parent = $1 AND schema_name = $2 AND table_name = $3`
	// strandedOf lists the tables this policy's retirement detached that
	// still exist, are no longer partitions, and whose upper bound is at
	// or before the cutoff (a drop a crash or a busy lock left undone),
	// oldest first: only what the kernel itself recorded, never a table
	// that merely carries its comment.
	strandedOf = `
SELECT r.schema_name, r.table_name, r.upper_bound
FROM retention_detached_partitions r
JOIN pg_catalog.pg_class c ON c.oid = r.table_oid AND c.relname = r.table_name AND c.relkind = 'r' AND NOT c.relispartition
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.schema_name
WHERE r.parent = $1 AND r.upper_bound <= now() - make_interval(days => $2::int)
ORDER BY r.upper_bound`
	// forgetGone forgets recorded tables that no longer exist (dropped by
	// hand): nothing is left to drop.
	forgetGone = `DELETE FROM retention_detached_partitions r
WHERE r.parent = $1 AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = r.table_oid AND c.relname = r.table_name)`
)

// dropStranded finishes the drops a previous call left undone.
func (p Policy) dropStranded(ctx context.Context, db DB, lockTimeout time.Duration, rep *PartitionReport) error {
	window, err := toInt32(int64(p.WindowDays))
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, forgetGone, p.Table); err != nil {
		return fmt.Errorf("prune %s: detached tables: %w", p.Table, err)
	}
	rows, err := db.Query(ctx, strandedOf, p.Table, window)
	if err != nil {
		return fmt.Errorf("prune %s: list detached tables: %w", p.Table, err)
	}
	stranded, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (oldPartition, error) {
		var o oldPartition
		return o, row.Scan(&o.schema, &o.name, &o.upper)
	})
	if err != nil {
		return fmt.Errorf("prune %s: list detached tables: %w", p.Table, err)
	}
	for _, o := range stranded {
		outcome, n, err := p.dropDetached(ctx, db, o, lockTimeout)
		switch {
		case err != nil:
			return err
		case outcome == retiredDropped:
			rep.Dropped, rep.DroppedRows = append(rep.Dropped, o.name), rep.DroppedRows+n
		case outcome == retiredKept:
			rep.Kept = append(rep.Kept, o.name)
		case outcome == retiredBusy:
			rep.Busy = append(rep.Busy, o.name)
		}
	}
	return nil
}

// keepPredicate is the SQL true for the rows that must stay.
func (p Policy) keepPredicate() string {
	if p.Keep != "" {
		return "(" + p.Keep + ")"
	}
	return "(" + p.Eligible + ") IS NOT TRUE"
}

// partitionRows counts a partition's rows, exactly: it runs under the
// retirement's ACCESS EXCLUSIVE lock, so the count is the rows the drop
// removes. The catalog's estimate (pg_class.reltuples) was cheaper but
// stale: 4,320 for a partition holding 150,000 let a cycle capped at
// 20,000 remove 170,000.
func partitionRows(ctx context.Context, tx pgx.Tx, o oldPartition) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, "SELECT count(*) FROM "+o.ident()).Scan(&n)
	return n, err
}

// lockOutcome: a lock not granted in time (55P03) leaves the partition for
// the next cycle; any other error is the call's.
func lockOutcome(p Policy, o oldPartition, err error) (retirement, int64, error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" {
		return retiredBusy, 0, nil
	}
	return 0, 0, fmt.Errorf("prune %s: retire %s: %w", p.Table, o.name, err)
}
