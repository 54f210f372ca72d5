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
	return rep, p.retireOld(ctx, db, olds, maxPartitions, rowCap, lockTimeout, &rep)
}

// retireOld retires the old partitions in order. Each is detached in its
// own transaction; the detached ones are dropped together, in one
// transaction at the end of the call (one commit, whose flush and unlinks
// are most of a retirement's cost), unless other sessions are committing
// writes: then each is dropped right after its detach and the next waits
// the pace (retirePace), so that a service's commits meet at most one
// retirement per interval.
func (p Policy) retireOld(ctx context.Context, db DB, olds []oldPartition, maxPartitions int, rowCap int64, lockTimeout time.Duration, rep *PartitionReport) (err error) {
	pace, err := newRetirePace(ctx, db, p)
	if err != nil {
		return err
	}
	var detached []detachedPartition
	defer func() {
		if derr := p.dropSet(ctx, db, detached, lockTimeout, rep); err == nil {
			err = derr
		}
	}()
	for _, o := range olds {
		if len(rep.Dropped)+len(detached) >= maxPartitions {
			rep.Capped = true
			return nil
		}
		if err := pace.wait(ctx); err != nil {
			return err
		}
		own := int64(0) // the transaction ids this retirement took
		outcome, rows, err := p.detach(ctx, db, o, lockTimeout, rowCap-rep.DroppedRows-detachedRows(detached), rowCap > 0)
		switch {
		case err != nil:
			return err
		case outcome == retiredDropped:
			own = 1
			detached = append(detached, detachedPartition{o: o, rows: rows})
			if pace.pacing() {
				own = 2
				// Writers are committing: this partition goes now, on its own.
				if err := p.dropSet(ctx, db, detached, lockTimeout, rep); err != nil {
					return err
				}
				detached = nil
			}
		case outcome == retiredKept:
			rep.Kept = append(rep.Kept, o.name)
		case outcome == retiredBusy:
			// Another session holds the table: every further attempt this
			// cycle would queue the writers behind it again. Next cycle.
			rep.Busy = append(rep.Busy, o.name)
			return nil
		case outcome == retiredCapped:
			// Over the row cap: the batch loop takes its rows, within the
			// cap, so a partition larger than the cap still goes.
			return nil
		}
		if err := pace.observe(ctx, own); err != nil {
			return err
		}
	}
	return nil
}

// detachedPartition is a partition this call detached, with its rows.
type detachedPartition struct {
	o    oldPartition
	rows int64
}

func detachedRows(d []detachedPartition) (n int64) {
	for _, x := range d {
		n += x.rows
	}
	return n
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

// detach is a partition's detach transaction. It holds ACCESS EXCLUSIVE
// on the partition (no write reaches its rows until it ends: a replay that
// would make a row ineligible waits, or holds the partition first and makes
// the lock wait), checks that no row must stay, marks and records the table,
// and DETACHes it last — which holds the parent, and so the service's
// writers, only from the DETACH to the commit. It commits asynchronously (no
// WAL flush for the writers to wait behind; a crash that loses the commit
// leaves the partition attached, whole). The drop, whose commit unlinks the
// files and must flush, runs in its own transaction on the detached table,
// which no writer of the parent reaches; the mark and the record let a drop
// lost to a crash be finished by the next call (dropStranded). Statements
// are sent in pipelines: three round trips and the commit.
func (p Policy) detach(ctx context.Context, db DB, o oldPartition, lockTimeout time.Duration, rowsLeft int64, capped bool) (retirement, int64, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("prune %s: retire %s: begin: %w", p.Table, o.name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	keep, rows, err := p.lockAndCheck(ctx, tx, o, lockTimeout, false, true)
	if err != nil || keep {
		return outcomeOf(p, o, keep, err)
	}
	if capped && rows > rowsLeft {
		return retiredCapped, 0, nil
	}
	b := &pgx.Batch{}
	b.Queue("COMMENT ON TABLE " + o.ident() + " IS " + p.detachedMark())
	b.Queue(recordDetached, o.ident(), o.schema, o.name, p.Table, o.upper)
	b.Queue("ALTER TABLE " + pgx.Identifier{p.Table}.Sanitize() + " DETACH PARTITION " + o.ident())
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == sqlStateLockNotAvailable {
			return retiredBusy, 0, nil // the parent's lock was not granted in time
		}
		return 0, 0, fmt.Errorf("prune %s: retire %s: detach: %w", p.Table, o.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("prune %s: retire %s: commit: %w", p.Table, o.name, err)
	}
	return retiredDropped, rows, nil
}

// lockAndCheck sets the transaction's lock timeout (and an asynchronous
// commit when async), takes ACCESS EXCLUSIVE on the table and reports
// whether a row of it must stay and, when count is set, its rows — one
// pipeline, one round trip. A lock not granted in time is 55P03
// (lockOutcome).
func (p Policy) lockAndCheck(ctx context.Context, tx pgx.Tx, o oldPartition, lockTimeout time.Duration, async, count bool) (keep bool, rows int64, err error) {
	commit := "on"
	if async {
		commit = "off"
	}
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('lock_timeout', $1, true), set_config('synchronous_commit', $2, true)",
		strconv.FormatInt(lockTimeout.Milliseconds(), 10), commit)
	b.Queue("LOCK TABLE " + o.ident() + " IN ACCESS EXCLUSIVE MODE")
	b.Queue("SELECT EXISTS (SELECT 1 FROM " + o.ident() + " WHERE " + p.keepPredicate() + ")").QueryRow(func(row pgx.Row) error {
		return row.Scan(&keep)
	})
	if count {
		// Exact: under the lock, the count is the rows the drop removes.
		// The catalog's estimate (pg_class.reltuples) was cheaper but stale:
		// 4,320 for a partition holding 150,000 let a cycle capped at
		// 20,000 remove 170,000.
		b.Queue("SELECT count(*) FROM " + o.ident()).QueryRow(func(row pgx.Row) error { return row.Scan(&rows) })
	}
	return keep, rows, tx.SendBatch(ctx, b).Close()
}

// outcomeOf turns lockAndCheck's answer into the step's outcome.
func outcomeOf(p Policy, o oldPartition, keep bool, err error) (retirement, int64, error) {
	if err != nil {
		return lockOutcome(p, o, err)
	}
	if keep {
		return retiredKept, 0, nil
	}
	return retiredDropped, 0, nil
}

// detachedMark is the comment the detach transaction leaves on a table it
// detached for dropping, as an SQL literal (the table name is the policy's
// code, its quotes doubled all the same).
func (p Policy) detachedMark() string {
	return "'" + strings.ReplaceAll(detachedMarkPrefix+p.Table, "'", "''") + "'"
}

// detachedMarkPrefix begins the mark; the policy's table name ends it.
const detachedMarkPrefix = "craig-retention: detached from "

// dropSet drops tables the detach transactions detached, in one
// transaction (one commit flush for all of them), after checking once more,
// under ACCESS EXCLUSIVE, that no row of each must stay (no writer of the
// parent reaches them; one writing to one by name would have to name it). A
// table that holds such a row is left, named in Kept; one whose lock is not
// granted in time is left for the next call (Busy), the others still go.
// Each table runs under a savepoint, its statements in two pipelines.
// rows < 0 asks for the table's rows to be counted (a stranded table).
func (p Policy) dropSet(ctx context.Context, db DB, set []detachedPartition, lockTimeout time.Duration, rep *PartitionReport) error {
	if len(set) == 0 {
		return nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("prune %s: drop: begin: %w", p.Table, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var dropped []detachedPartition
	var kept, busy []string
	for _, d := range set {
		outcome, rows, err := p.dropOne(ctx, tx, d, lockTimeout)
		switch {
		case err != nil:
			return err
		case outcome == retiredDropped:
			d.rows = rows
			dropped = append(dropped, d)
		case outcome == retiredKept:
			kept = append(kept, d.o.name)
		default:
			busy = append(busy, d.o.name)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("prune %s: drop: commit: %w", p.Table, err)
	}
	for _, d := range dropped {
		rep.Dropped, rep.DroppedRows = append(rep.Dropped, d.o.name), rep.DroppedRows+d.rows
	}
	rep.Kept, rep.Busy = append(rep.Kept, kept...), append(rep.Busy, busy...)
	return nil
}

// dropOne is one table of dropSet, under its own savepoint.
func (p Policy) dropOne(ctx context.Context, tx pgx.Tx, d detachedPartition, lockTimeout time.Duration) (retirement, int64, error) {
	if _, err := tx.Exec(ctx, "SAVEPOINT retention_drop"); err != nil {
		return 0, 0, fmt.Errorf("prune %s: drop %s: %w", p.Table, d.o.name, err)
	}
	keep, rows, err := p.lockAndCheck(ctx, tx, d.o, lockTimeout, false, d.rows < 0)
	if d.rows >= 0 {
		rows = d.rows
	}
	if err == nil && !keep {
		b := &pgx.Batch{}
		b.Queue(forgetDetached, p.Table, d.o.schema, d.o.name)
		b.Queue("DROP TABLE " + d.o.ident())
		b.Queue("RELEASE SAVEPOINT retention_drop")
		if err = tx.SendBatch(ctx, b).Close(); err == nil {
			return retiredDropped, rows, nil
		}
	}
	outcome, _, oerr := outcomeOf(p, d.o, keep, err)
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT retention_drop"); rerr != nil && oerr == nil {
		oerr = fmt.Errorf("prune %s: drop %s: %w", p.Table, d.o.name, rerr)
	}
	return outcome, 0, oerr
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
	set := make([]detachedPartition, len(stranded))
	for i, o := range stranded {
		set[i] = detachedPartition{o: o, rows: -1}
	}
	return p.dropSet(ctx, db, set, lockTimeout, rep)
}

// keepPredicate is the SQL true for the rows that must stay.
func (p Policy) keepPredicate() string {
	if p.Keep != "" {
		return "(" + p.Keep + ")"
	}
	return "(" + p.Eligible + ") IS NOT TRUE"
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
