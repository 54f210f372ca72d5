package prune

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotReadCommitted: partition retirement was handed a transaction that
// is not READ COMMITTED. Its keep check must see every row committed while
// it waited for its lock; a REPEATABLE READ or SERIALIZABLE snapshot, taken
// before the lock was granted, would miss a row that must stay and drop it.
var ErrNotReadCommitted = errors.New("partition retirement needs READ COMMITTED transactions")

// txBeginner is a DB that begins a transaction with options (a pool, a
// connection); a pgx.Tx is not one.
type txBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// beginReadCommitted begins a READ COMMITTED transaction whatever the
// session's or the database's default_transaction_isolation; inside a
// caller's transaction (a savepoint), it refuses one that is not READ
// COMMITTED (ErrNotReadCommitted).
func beginReadCommitted(ctx context.Context, db DB) (pgx.Tx, error) {
	if b, ok := db.(txBeginner); ok {
		return b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	var iso string
	if err := tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&iso); err != nil || iso != string(pgx.ReadCommitted) {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		if err == nil {
			err = fmt.Errorf("%w: the caller's transaction is %s", ErrNotReadCommitted, iso)
		}
		return nil, err
	}
	return tx, nil
}

type retirement int

const (
	retiredDropped retirement = iota
	retiredKept
	retiredBusy
	retiredCapped
	// retiredGone: another call retired the partition first (it is no
	// longer a partition of the table, or no longer exists).
	retiredGone
	// retiredFailed: the DROP failed for another reason than a lock.
	retiredFailed
	// retiredReturned: a detached table younger than the cutoff (the
	// window widened since its detach), attached again.
	retiredReturned
)

// Error codes the retirement tells apart.
const (
	sqlStateUndefinedTable = "42P01" // a relation dropped, or not a partition of the table
	// sqlStateDeadlock: the retirement holds a partition and waits for the
	// parent while a statement through the parent holds the parent and
	// waits for the partition (an UPDATE the planner did not prune, a
	// racing call's batch). The server aborts the retirement's transaction
	// (nothing of it is done) when its wait outlasts deadlock_timeout
	// first, as the default lock timeout, 200 ms against 1 s, makes sure:
	// the partition is busy, for the next cycle.
	sqlStateDeadlock = "40P01"
)

// retireRun is one Retire call: its bounds and what it has taken so far.
type retireRun struct {
	p             Policy
	db            DB
	lockTimeout   time.Duration
	maxPartitions int
	rowCap        int64 // 0: no cap of the call's own
	rep           *PartitionReport
	// detached are the partitions this call detached and has not dropped.
	detached []detachedPartition
	// returned are the tables this call attached again (it must not detach
	// them once more: their rows go by the batch loop, or stay).
	returned map[string]bool
	// taken counts the partitions this call took off the table: dropped,
	// detached, and detached ones whose drop was busy (they stay detached
	// until a later call). The partition cap bounds it.
	taken int
}

// detachedPartition is a partition a call detached, with the rows it held
// at its detach.
type detachedPartition struct {
	o    oldPartition
	rows int64
	// young: its upper bound is after the cutoff (a stranded table whose
	// window widened): attached again, never dropped.
	young bool
}

func (r *retireRun) full() bool { return r.taken >= r.maxPartitions }

// rowsLeft is the rows the call may still remove within its cap.
func (r *retireRun) rowsLeft() int64 {
	n := r.rowCap - r.rep.DroppedRows
	for _, d := range r.detached {
		n -= d.rows
	}
	return n
}

// retireOld retires the old partitions in order. Each is detached in its
// own transaction; the detached ones are dropped together, in one
// transaction at the end of the call (one commit, whose flush and unlinks
// are most of a retirement's cost), unless other sessions are committing
// writes: then each is dropped right after its detach and the next waits
// the pace (retirePace), so that a service's commits meet at most one
// retirement per interval.
func (r *retireRun) retireOld(ctx context.Context, olds []oldPartition) (err error) {
	pace, err := newRetirePace(ctx, r.db, r.p)
	if err != nil {
		return err
	}
	defer func() {
		if _, derr := r.dropDetached(ctx); err == nil {
			err = derr
		}
	}()
	for _, o := range olds {
		if r.full() || (r.rowCap > 0 && r.rowsLeft() <= 0) {
			// The partition cap, or the row cap spent: the next call goes
			// on (counting a partition only to find it over the cap would
			// read it for nothing).
			r.rep.Capped = true
			return nil
		}
		if r.returned[o.name] {
			continue
		}
		if err := pace.wait(ctx); err != nil {
			return err
		}
		own, stop, err := r.retireOne(ctx, o, pace.pacing())
		if err != nil || stop {
			return err
		}
		if err := pace.observe(ctx, own); err != nil {
			return err
		}
	}
	return nil
}

// retireOne detaches one partition (and drops it at once when paced). It
// returns the transaction ids it took (every transaction granted an ACCESS
// EXCLUSIVE lock takes one: the lock is WAL-logged for standbys) and
// whether the call must stop.
func (r *retireRun) retireOne(ctx context.Context, o oldPartition, paced bool) (own int64, stop bool, err error) {
	outcome, rows, err := r.p.detach(ctx, r.db, o, r.lockTimeout, r.rowsLeft(), r.rowCap > 0)
	switch {
	case err != nil:
		return 0, true, err
	case outcome == retiredDropped:
		r.detached = append(r.detached, detachedPartition{o: o, rows: rows})
		r.taken++
		if !paced {
			return 1, false, nil
		}
		// Writers are committing: this partition goes now, on its own.
		busy, err := r.dropDetached(ctx)
		// A busy drop: every further attempt this cycle would queue
		// behind the same session. Next cycle.
		return 2, busy, err
	case outcome == retiredKept:
		r.rep.Kept = append(r.rep.Kept, o.name)
		return 1, false, nil // the lock's: an ACCESS EXCLUSIVE lock is WAL-logged for standbys, under an xid
	case outcome == retiredBusy:
		// Another session holds the table: every further attempt this
		// cycle would queue the writers behind it again. Next cycle.
		r.rep.Busy = append(r.rep.Busy, o.name)
		return 0, true, nil
	case outcome == retiredCapped:
		// Over the row cap: the batch loop takes its rows, within the
		// cap, so a partition larger than the cap still goes.
		return 0, true, nil
	}
	// Gone: another call retired it (its lock, if granted, took an xid;
	// counting one when it did not misses at most one foreign write).
	return 1, false, nil
}

// detach is a partition's detach transaction. It holds ACCESS EXCLUSIVE
// on the partition (no write reaches its rows until it ends: a replay that
// would make a row ineligible waits, or holds the partition first and makes
// the lock wait), checks that it is still a partition of the table and that
// no row must stay, marks and records the table with its bounds, DETACHes
// it — which holds the parent, and so the service's writers, only from the
// DETACH to the commit — and seals it (sealName). It commits asynchronously (no WAL
// flush for the writers to wait behind; a crash that loses the commit
// leaves the partition attached, whole, and unrecorded). The drop, whose
// commit unlinks the files and must flush, runs in its own transaction on
// the detached table, which no writer of the parent reaches; the mark and
// the record let a drop lost to a crash be finished by the next call
// (dropStranded). Statements are sent in pipelines: three round trips and
// the commit.
func (p Policy) detach(ctx context.Context, db DB, o oldPartition, lockTimeout time.Duration, rowsLeft int64, capped bool) (retirement, int64, error) {
	tx, err := beginReadCommitted(ctx, db)
	if err != nil {
		return 0, 0, fmt.Errorf("prune %s: retire %s: begin: %w", p.Table, o.name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	c, err := p.lockAndCheck(ctx, tx, o, lockTimeout)
	if err != nil || c.keep || c.gone {
		return c.outcome(p, o, err)
	}
	if capped && c.rows > rowsLeft {
		return retiredCapped, 0, nil
	}
	b := &pgx.Batch{}
	b.Queue("COMMENT ON TABLE " + o.ident() + " IS " + p.detachedMark())
	b.Queue(recordDetached, o.ident(), o.schema, o.name, p.Table, o.lower, o.upper)
	b.Queue("ALTER TABLE " + pgx.Identifier{p.Table}.Sanitize() + " DETACH PARTITION " + o.ident())
	b.Queue(sealDetached(o))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return lockOutcome(p, o, err) // a parent's lock not granted in time: busy
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("prune %s: retire %s: commit: %w", p.Table, o.name, err)
	}
	return retiredDropped, c.rows, nil
}

// check is what lockAndCheck found under the lock.
type check struct {
	keep bool  // a row must stay
	rows int64 // the table's rows
	gone bool  // the table is no longer a partition of the policy's table
}

// scanStill reads whether the table is still what the step expects (a
// partition of the table, or a detached table): if not, it is gone.
func (c *check) scanStill(row pgx.Row) error {
	var still bool
	err := row.Scan(&still)
	c.gone = !still
	return err
}

// outcome turns a check into the step's outcome.
func (c check) outcome(p Policy, o oldPartition, err error) (retirement, int64, error) {
	switch {
	case err != nil:
		return lockOutcome(p, o, err)
	case c.gone:
		return retiredGone, 0, nil
	case c.keep:
		return retiredKept, 0, nil
	}
	return retiredDropped, c.rows, nil
}

// lockAndCheck sets the transaction's lock timeout and an asynchronous
// commit, takes ACCESS EXCLUSIVE on a partition and reports whether it is
// still a partition of the policy's table (a racing call may have detached
// it while this one waited), whether a row of it must stay, and its rows —
// one pipeline, one round trip, in a READ COMMITTED transaction
// (beginReadCommitted): each statement after the LOCK reads a snapshot
// taken after it was granted, so every row committed while it waited is
// seen. Counted exactly: under the lock, the count is the rows the drop
// removes (the catalog's estimate, pg_class.reltuples, was cheaper but
// stale: 4,320 for a partition holding 150,000 let a cycle capped at
// 20,000 remove 170,000). A lock not granted in time is 55P03
// (lockOutcome).
func (p Policy) lockAndCheck(ctx context.Context, tx pgx.Tx, o oldPartition, lockTimeout time.Duration) (c check, err error) {
	b := &pgx.Batch{}
	lockFirst(b, o, lockTimeout, "off")
	b.Queue(stillPartition, o.ident(), p.Table).QueryRow(c.scanStill)
	b.Queue("SELECT EXISTS (SELECT 1 FROM " + o.ident() + " WHERE " + p.keepPredicate() + ")").QueryRow(func(row pgx.Row) error {
		return row.Scan(&c.keep)
	})
	b.Queue("SELECT count(*) FROM " + o.ident()).QueryRow(func(row pgx.Row) error { return row.Scan(&c.rows) })
	return c, tx.SendBatch(ctx, b).Close()
}

// lockFirst queues the transaction's lock timeout and commit mode, then
// the ACCESS EXCLUSIVE lock on the table.
func lockFirst(b *pgx.Batch, o oldPartition, lockTimeout time.Duration, synchronousCommit string) {
	b.Queue("SELECT set_config('lock_timeout', $1, true), set_config('synchronous_commit', $2, true)",
		serverMillis(lockTimeout), synchronousCommit)
	b.Queue("LOCK TABLE " + o.ident() + " IN ACCESS EXCLUSIVE MODE")
}

// sealName names the constraint the detach transaction adds to the table
// it detaches, CHECK (false) NOT VALID: the rows it checked stay (NOT
// VALID: nothing is scanned), and no INSERT, UPDATE or COPY can put a row
// into the table until it is dropped (or attached again, which removes
// it). A table still sealed at its drop holds exactly the rows its detach
// checked and counted; one that is not (its seal removed by hand, or a
// table detached before seals were) is checked and counted again.
const sealName = "craig_retention_detached"

// sealDetached is the seal's DDL (after the DETACH, on the detached table).
func sealDetached(o oldPartition) string {
	return "ALTER TABLE " + o.ident() + " DROP CONSTRAINT IF EXISTS " + sealName + ", ADD CONSTRAINT " + sealName + " CHECK (false) NOT VALID"
}

// isSealed is true while the table carries the detach's seal, unchanged.
// Kernel-built catalog SQL; the table and the name are parameters.
const isSealed = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
    WHERE conrelid = to_regclass($1) AND conname = $2 AND contype = 'c' AND NOT convalidated
      AND pg_catalog.pg_get_constraintdef(oid) = 'CHECK (false) NOT VALID')`

// stillPartition is true while the table is a partition of the policy's
// table. Kernel-built catalog SQL; both names are parameters.
const stillPartition = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2))`

// stillDetached is true while the table exists and is not a partition.
const stillDetached = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = to_regclass($1) AND NOT relispartition)`

// detachedMark is the comment the detach transaction leaves on a table it
// detached for dropping, as an SQL literal (the table name is the policy's
// code, its quotes doubled all the same).
func (p Policy) detachedMark() string {
	return "'" + strings.ReplaceAll(detachedMarkPrefix+p.Table, "'", "''") + "'"
}

// detachedMarkPrefix begins the mark; the policy's table name ends it.
const detachedMarkPrefix = "craig-retention: detached from "

// keepPredicate is the SQL true for the rows that must stay.
func (p Policy) keepPredicate() string {
	if p.Keep != "" {
		return "(" + p.Keep + ")"
	}
	return "(" + p.Eligible + ") IS NOT TRUE"
}

// lockOutcome: a lock not granted in time (55P03) leaves the partition for
// the next cycle; a table another call retired first (42P01: it no longer
// exists, or is no longer a partition of the table) is gone; any other
// error is the call's.
func lockOutcome(p Policy, o oldPartition, err error) (retirement, int64, error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case sqlStateLockNotAvailable, sqlStateDeadlock:
			return retiredBusy, 0, nil
		case sqlStateUndefinedTable:
			return retiredGone, 0, nil
		}
	}
	return 0, 0, fmt.Errorf("prune %s: retire %s: %w", p.Table, o.name, err)
}
