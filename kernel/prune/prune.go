// Package prune is the one batch loop every swept table goes through.
//
// A Policy names a table, its retention window and its batch delete (a
// sqlc-generated :execrows query that deletes at most `limit` eligible rows,
// computes its cutoff with the database clock and repeats the eligibility
// predicate in the outer DELETE). PruneTable runs that delete in batches until
// a short batch, never deleting more than the cycle cap in one call. A batch
// delete may continue where the previous batch of the same call stopped (a
// keyset Cursor, BatchParams.Cursor), so that a large backlog drains at the speed of
// its own rows rather than re-reading what earlier batches deleted.
//
// What a batch costs the database it protects is kept small three ways (the
// bench in bench/ measures each): on the sweep's own connection (a Session)
// the batch settings are made once per call, so a batch is two round trips
// (its bound read and its DELETE, each committing on its own); a policy whose
// delete is a keyset range scan runs generic plans (GenericPlans), planned
// once per session instead of once per batch; and a policy that yields to
// writers (YieldToWriters) runs small batches while other sessions of the
// server are committing writes, so their commits never wait behind a large
// batch's WAL.
package prune

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/craig/retention/kernel/failpoint"
)

const (
	// DefaultBatchSize bounds the rows one DELETE removes, so the lock and WAL
	// footprint of each statement stays small and the outbox drain can
	// interleave with a large first backlog.
	DefaultBatchSize = 5_000

	// DefaultCycleCap is the anomaly guard: a cycle that would delete more than
	// this stops and warns rather than trust a clock that may have jumped
	// (NTP glitch, VM migration: now() - 30 d could then match everything).
	DefaultCycleCap int64 = 1_000_000

	// MaxWindowDays is the longest retention window accepted (ten years); a
	// larger value is a typo, not a policy.
	MaxWindowDays = 3650

	// MaxConsecutiveTimeouts is how many batches in a row may time out
	// before the loop reacts: the first time by dropping to the reduced batch
	// size (a smaller DELETE holds fewer locks and finishes sooner), the
	// second time by giving up the table for this cycle. Three rides out a
	// brief lock held by a replay or a vacuum without hammering the server.
	MaxConsecutiveTimeouts = 3

	// reducedBatchDivisor derives the reduced batch size from the normal one
	// when a policy sets none: a tenth, as River's job cleaner does.
	reducedBatchDivisor = 10

	// yieldBatchDivisor derives the yield batch size from the normal one
	// when a policy sets none: a hundredth (50 rows of the outbox, about
	// 18 KB of WAL). The knee of the bench's drain-rate vs writer-p99 curve
	// (1,000 events/s, >= 5,000 samples a round, pooled): the
	// writer's p99 ratio was 2.13x and 2.21x in two runs at 50 rows (the
	// same as beside a CPU-only load of one backend, 2.2x: the 2-core
	// floor), 2.11x and 12.6x at 250, 14x and 57x at 1,000, 63x and 90x
	// with full batches; the drain ran at 54-61k rows/s at 50 rows, 172-181k
	// at 250. Only 50 was the floor in both runs.
	yieldBatchDivisor = 100
)

// DB is what a batch delete runs on: a *pgx.Conn, a pgx.Tx or a pool. It is
// a superset of the DBTX interface sqlc generates, so a generated query
// constructor accepts it unchanged.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Session is a DB that is a single database session (a *pgx.Conn, or a
// wrapper around one that exposes it): a setting made on it holds for every
// later statement until it is changed. PruneTable on a Session sets the
// batch settings once per call (see Policy.StatementTimeout).
type Session interface {
	DB
	PgConn() *pgconn.PgConn
}

// BatchParams are the bound parameters of one batch delete. Both come from
// validated integers through checked conversions; neither is ever text.
type BatchParams struct {
	// WindowDays is the retention window: rows older than
	// now() - make_interval(days => WindowDays) are eligible.
	WindowDays int32
	// Limit is the most rows the statement may delete.
	Limit int32
	// Cursor is the keyset position of the PruneTable call the batch
	// belongs to (nil outside one: a nil *Cursor has no key and ignores
	// Advance).
	Cursor *Cursor
}

// DeleteBatchFunc runs one batch delete and returns the rows it deleted.
type DeleteBatchFunc func(ctx context.Context, db DB, p BatchParams) (int64, error)

// Cursor is the keyset position of a batch delete that takes its table's
// rows in the order of a unique key (age column, primary key): the last key
// the previous batch of the same PruneTable call covered. PruneTable hands
// every batch of one call the same Cursor, empty at the start, in its
// BatchParams. A batch delete that uses it starts after the
// key and, once its DELETE succeeded, moves it to the last key it covered;
// one that ignores it deletes the same rows, only slower on a large backlog.
// When a batch fails (a timeout, say), PruneTable puts the cursor back where
// the batch found it, so the retried batch covers the same keys.
type Cursor struct {
	at  time.Time
	id  [16]byte
	set bool
	// full is true when the current batch advanced the cursor: it covered
	// a whole batch of keys, so a delete shorter than its limit (rows a
	// concurrent replay made ineligible) does not mean none is left.
	full bool
}

// Key returns the cursor's key, and false when no batch has covered one yet
// (start from the beginning of the table).
func (c *Cursor) Key() (at time.Time, id [16]byte, ok bool) {
	if c == nil {
		return time.Time{}, [16]byte{}, false
	}
	return c.at, c.id, c.set
}

// Advance moves the cursor to the last key a batch covered. A nil cursor
// (a batch delete called outside PruneTable) ignores it.
func (c *Cursor) Advance(at time.Time, id [16]byte) {
	if c != nil {
		c.at, c.id, c.set, c.full = at, id, true, true
	}
}

// Policy is one swept table: what its team declares (Declaration) and the
// bounds and modes the kernel applies to it (Bounds). A service team writes
// only the Declaration (app.Local); the kernel fills the Bounds from the
// settings and its defaults.
type Policy struct {
	Declaration
	Bounds
}

// Declaration is what a team writes about one swept table: the table, the
// column its age is read from, which rows may go and which must stay, and
// its batch delete.
type Declaration struct {
	// Table is the table name; it is also the metric and report label
	// unless Name is set.
	Table string
	// Name labels the policy in metrics, reports and logs when its table
	// has more than one policy (the outbox's published rows and its dead
	// letters, ADR-075); empty means Table. Label returns it.
	Name string
	// DeleteBatch is the table's batch delete.
	DeleteBatch DeleteBatchFunc
	// AgeColumn is the timestamp column the window applies to, as in the
	// batch delete (created_at, received_at, completed_at, ...).
	AgeColumn string
	// Eligible is the batch delete's static eligibility predicate WITHOUT
	// the age cutoff, exactly as written in its query file (for example
	// "published_at IS NOT NULL"). The kernel builds its read-only queries
	// from it: the dry-run plan, the backlog gauge, the overrun invariant
	// and the start-up plan check. It is code, reviewed like SQL, never
	// input; the conformance suite (kerneltest.CheckPolicy) proves it selects
	// exactly what the delete deletes.
	Eligible string
	// Invariant names the watchdog reporting rows that overrun the window;
	// empty means "<table>_retention_overrun".
	Invariant string
	// Keep is Eligible's exact complement, written so that an index can
	// answer it: true for every row Eligible is not TRUE for (NULL
	// included), false for every other. For the outbox, whose Eligible is
	// "published_at IS NOT NULL", it is "published_at IS NULL", which the
	// pending index covers. Partition retirement asks whether any row of an
	// old partition matches it before dropping the partition; empty means
	// "(Eligible) IS NOT TRUE", which no index answers (every row is read).
	// Reviewed SQL like Eligible; kerneltest.CheckPolicy proves the
	// complement on the seeded rows.
	Keep string
	// GenericPlans runs the batch statements with plan_cache_mode =
	// force_generic_plan: each prepared statement is planned once per
	// session instead of once per batch. Set it only for a batch delete
	// whose best plan does not depend on its parameter values (a keyset
	// range scan of the sweep index, as the transport sweeps are; the bench
	// measured 0.82 -> 0.89 of the unbounded DELETE with it). A delete that
	// relies on the planner seeing the cutoff (a LIMIT without ORDER BY, as
	// the ctid-shaped local sweeps are) must leave it false: a generic plan
	// may scan the whole table.
	GenericPlans bool
}

// Bounds are the limits and modes the kernel applies to a swept table's
// prune: its window, its batch sizes and cap, its timeouts, yielding to
// writers, partition retirement and pacing. The zero value of each field
// means the kernel's default (WindowDays 0: the table is not swept).
type Bounds struct {
	// WindowDays is the retention window in days; 0 disables the sweep of
	// this table (and only this table).
	WindowDays int
	// BatchSize is the most rows one DELETE removes; 0 means DefaultBatchSize.
	BatchSize int
	// CycleCap is the most rows one PruneTable call deletes; 0 means
	// DefaultCycleCap.
	CycleCap int64
	// StatementTimeout and LockTimeout bound each batch statement on the
	// server; 0 leaves the server's (role's, session's) setting.
	//
	// How they are set depends on what PruneTable runs on. On one session
	// (a *pgx.Conn, as the sweep's lease connection is: see Session) they
	// are set for the session once, for the duration of the call, and put
	// back on every exit path; every batch statement then commits on its
	// own, so a batch costs two round trips (the bound read and the
	// DELETE) instead of five. On a pool, or with both timeouts 0, each
	// batch runs in its own transaction with SET LOCAL timeouts (none with
	// both 0). Inside the caller's transaction (a pgx.Tx) the batch is a
	// savepoint and the settings reach the caller's transaction.
	//
	// Outside the caller's transaction, batches also commit asynchronously
	// (synchronous_commit = off): a batch does not wait for its WAL to
	// reach the disk, which would otherwise cost one WAL flush per batch. A
	// server crash may undo the last batches' deletes (never a part of one,
	// never a later batch without the earlier ones: WAL is replayed in
	// order); the next cycle deletes those rows again.
	//
	// A batch delete has ONE writing statement (a sqlc :execrows query,
	// optionally after reads): a statement that fails deletes nothing,
	// whichever way the batch runs.
	StatementTimeout time.Duration
	LockTimeout      time.Duration
	// ReducedBatchSize is the batch size after MaxConsecutiveTimeouts
	// timeouts in a row; 0 means a tenth of the batch size (at least 1).
	ReducedBatchSize int
	// YieldToWriters keeps batches small while other sessions of the server
	// are committing writes: then (and for YieldHold after the last one
	// seen, and for YieldProbe at the start of a call) batches run at the
	// yield batch size, so that another
	// session's commit never waits behind a full batch's WAL; with nobody
	// else writing, at the full batch size. It costs one round trip a batch
	// (reading the server's transaction horizon). The number of batches of
	// a run then depends on the server's other traffic, which a dry run
	// (Plan) cannot know: it plans full batches.
	YieldToWriters bool
	// YieldBatchSize is the batch size while yielding to writers; 0 means
	// a hundredth of the batch size (at least 1).
	YieldBatchSize int
	// RetirePartitions lets a call retire whole old partitions first when
	// the table turns out (from the catalog) to be range-partitioned by its
	// age column. The kernel sets it on every policy it builds (the sweep's
	// and every app.Local's); no service setting turns it on or off.
	RetirePartitions bool
	// MaxPartitions bounds the partitions one call drops (0:
	// DefaultMaxPartitions); PartitionLockTimeout bounds each retirement's
	// lock waits (0: DefaultPartitionLockTimeout).
	MaxPartitions        int
	PartitionLockTimeout time.Duration
	// PartitionPace is the least time between two retirements while other
	// sessions commit writes (YieldToWriters; 0: DefaultPartitionPace).
	PartitionPace time.Duration
	// Pacing pauses the batch loop for lagging replicas and paces its WAL;
	// the zero value does neither.
	Pacing Pacing
}

// Report is the outcome of one PruneTable call.
type Report struct {
	// Table is the policy's label (its table, or its Name).
	Table string
	// Disabled is true when the window is 0 and nothing was attempted.
	Disabled bool
	// Deleted is the number of rows deleted: exact for the batches, plus
	// the dropped partitions' rows (Partitions.DroppedRows, which the
	// catalog counts).
	Deleted int64
	// Batches is the number of DELETE statements run.
	Batches int
	// Capped is true when the cycle cap stopped the loop while rows may
	// remain: a possible anomaly that callers must warn about.
	Capped bool
	// Timeouts counts batches that hit the statement or lock timeout.
	Timeouts int
	// Reduced is true when timeouts made the loop fall back to the reduced
	// batch size.
	Reduced bool
	// Yielded counts the batches run at the yield batch size because other
	// sessions were committing writes (Policy.YieldToWriters; the small
	// batches of a call's first YieldProbe are not counted).
	Yielded int
	// Partitions is what partition retirement did (a range-partitioned
	// table only; its dropped rows are counted in Deleted too).
	Partitions PartitionReport
	// PausedReplicaLag and PausedWALRate are how long the loop waited for
	// lagging replicas and to keep its WAL rate (Policy.Pacing);
	// PauseExhausted names why the call ended early when its pause budget
	// ran out (the table waits for the next cycle). MaxReplicaLagSeen is
	// the largest replica lag read; ReplicaLagUnreadable is true when a
	// replica's lag was hidden from this role (grant it pg_monitor).
	// WALBytes is the WAL written around the batches when pacing WAL.
	PausedReplicaLag     time.Duration
	PausedWALRate        time.Duration
	PauseExhausted       string
	MaxReplicaLagSeen    time.Duration
	ReplicaLagUnreadable bool
	WALBytes             int64
	// Duration is the wall time spent.
	Duration time.Duration
}

// ErrBatchTimeouts is returned (wrapped) when batches keep timing out even at
// the reduced batch size; the table is left for the next cycle.
var ErrBatchTimeouts = errors.New("prune: batches keep timing out")

// ErrInvalidPolicy is returned (wrapped) for a policy that cannot run.
var ErrInvalidPolicy = errors.New("prune: invalid policy")

// Validate checks the policy's fields and bounds.
func (p Policy) Validate() error {
	switch {
	case p.Table == "":
		return fmt.Errorf("%w: empty table name", ErrInvalidPolicy)
	case p.DeleteBatch == nil:
		return fmt.Errorf("%w: %s: no batch delete", ErrInvalidPolicy, p.Table)
	case p.WindowDays < 0 || p.WindowDays > MaxWindowDays:
		return fmt.Errorf("%w: %s: window %d days outside 0..%d", ErrInvalidPolicy, p.Table, p.WindowDays, MaxWindowDays)
	case p.BatchSize < 0 || p.BatchSize > math.MaxInt32:
		return fmt.Errorf("%w: %s: batch size %d outside 0..%d", ErrInvalidPolicy, p.Table, p.BatchSize, math.MaxInt32)
	case p.CycleCap < 0:
		return fmt.Errorf("%w: %s: negative cycle cap %d", ErrInvalidPolicy, p.Table, p.CycleCap)
	case p.YieldBatchSize < 0 || p.YieldBatchSize > math.MaxInt32:
		return fmt.Errorf("%w: %s: yield batch size %d outside 0..%d", ErrInvalidPolicy, p.Table, p.YieldBatchSize, math.MaxInt32)
	case p.ReducedBatchSize < 0 || p.ReducedBatchSize > math.MaxInt32:
		return fmt.Errorf("%w: %s: reduced batch size %d outside 0..%d", ErrInvalidPolicy, p.Table, p.ReducedBatchSize, math.MaxInt32)
	case p.StatementTimeout < 0 || p.LockTimeout < 0:
		return fmt.Errorf("%w: %s: negative timeout", ErrInvalidPolicy, p.Table)
	case p.PartitionPace < 0:
		return fmt.Errorf("%w: %s: negative partition pace", ErrInvalidPolicy, p.Table)
	}
	return p.Pacing.problems(p.Table)
}

func (p Policy) batchSize() int64 {
	if p.BatchSize == 0 {
		return DefaultBatchSize
	}
	return int64(p.BatchSize)
}

func (p Policy) yieldBatchSize() int64 {
	if p.YieldBatchSize > 0 {
		return int64(p.YieldBatchSize)
	}
	return max(1, p.batchSize()/yieldBatchDivisor)
}

func (p Policy) reducedBatchSize() int64 {
	if p.ReducedBatchSize > 0 {
		return int64(p.ReducedBatchSize)
	}
	return max(1, p.batchSize()/reducedBatchDivisor)
}

// Label names the policy in metrics, reports and logs: Name, or Table when
// Name is empty.
func (d Declaration) Label() string {
	if d.Name != "" {
		return d.Name
	}
	return d.Table
}

// InvariantName is the name of the policy's overrun watchdog.
func (p Policy) InvariantName() string {
	if p.Invariant != "" {
		return p.Invariant
	}
	return p.Table + "_retention_overrun"
}

func (p Policy) partitionPace() time.Duration {
	if p.PartitionPace == 0 {
		return DefaultPartitionPace
	}
	return p.PartitionPace
}

func (p Policy) cycleCap() int64 {
	if p.CycleCap == 0 {
		return DefaultCycleCap
	}
	return p.CycleCap
}

// PruneTable deletes the policy's eligible rows in batches on db, until a
// batch comes back short (nothing left) or the next batch could pass the cycle
// cap. It checks ctx between batches, so cancellation stops it within one
// statement. The count in the report is exact: the sum of rows affected.
func PruneTable(ctx context.Context, db DB, p Policy) (rep Report, err error) {
	start := time.Now()
	rep.Table = p.Label()
	defer func() { rep.Duration = time.Since(start) }()
	if err := p.Validate(); err != nil {
		return rep, err
	}
	if p.WindowDays == 0 {
		rep.Disabled = true
		return rep, nil
	}
	window, err := toInt32(int64(p.WindowDays))
	if err != nil {
		return rep, fmt.Errorf("prune %s: window: %w", p.Table, err)
	}
	// Whole old partitions first (a partitioned table only); what they
	// held counts toward the cycle cap, and the batch loop then takes the
	// eligible rows of the partitions kept and of the boundary one.
	if p.RetirePartitions {
		if rep.Partitions, err = p.Retire(ctx, db, p.MaxPartitions, p.cycleCap(), p.PartitionLockTimeout); err != nil {
			return rep, err
		}
		rep.Deleted, rep.Capped = rep.Partitions.DroppedRows, rep.Partitions.Capped
		if rep.Capped {
			return rep, nil // more old partitions than the cap: next cycle drops them, not the batch loop
		}
	}
	run, restore, err := p.batchRunner(ctx, db)
	if err != nil {
		return rep, fmt.Errorf("prune %s: %w", p.Table, err)
	}
	defer func() {
		if rerr := restore(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("prune %s: %w", p.Table, rerr))
		}
	}()
	watch, err := newYieldWatch(ctx, db, p.YieldToWriters)
	if err != nil {
		return rep, fmt.Errorf("prune %s: %w", p.Table, err)
	}
	l := &pruneLoop{p: p, db: db, run: run, watch: watch, pace: newPacer(p.Pacing, db, &rep), window: window, batch: p.batchSize(), capRows: p.cycleCap(), cursor: &Cursor{}, rep: &rep}
	err = l.loop(ctx)
	return rep, err
}

// batchRunner picks how batches run on db. On an idle Session (the lease's
// connection) the batch settings are made once for the whole prune and each
// batch is the policy's own delete; restore puts the session back. Anywhere
// else (a pool, the caller's transaction) each batch runs with runBatch and
// restore does nothing.
func (p Policy) batchRunner(ctx context.Context, db DB) (run DeleteBatchFunc, restore func() error, err error) {
	sess, ok := db.(Session)
	if _, nested := db.(pgx.Tx); !ok || nested || sess.PgConn().TxStatus() != txStatusIdle {
		return p.runBatch, func() error { return nil }, nil
	}
	restore, err = p.setSession(ctx, sess)
	if err != nil {
		return nil, nil, err
	}
	return p.DeleteBatch, restore, nil
}

// pruneLoop is one PruneTable's batch loop.
type pruneLoop struct {
	p           Policy
	db          DB
	run         DeleteBatchFunc
	watch       *yieldWatch
	pace        *pacer
	window      int32
	batch       int64 // the batch size now (reduced after repeated timeouts)
	capRows     int64
	cursor      *Cursor
	rep         *Report
	consecutive int // timeouts in a row
}

// loop runs batches until one comes back short, the next could pass the
// cycle cap, ctx ends or a batch fails for good.
func (l *pruneLoop) loop(ctx context.Context) error {
	for {
		done, err := l.next(ctx)
		if err != nil || done {
			return err
		}
	}
}

// next runs one batch; done is true when the prune is over.
func (l *pruneLoop) next(ctx context.Context) (done bool, err error) {
	p := l.p
	if err := ctx.Err(); err != nil {
		return true, fmt.Errorf("prune %s: %w", p.Table, err)
	}
	remaining := l.capRows - l.rep.Deleted
	if remaining <= 0 {
		// The previous batch was full and the cap is reached: rows may
		// remain, and deleting them is for the next cycle (or a human).
		l.rep.Capped = true
		return true, nil
	}
	limit64 := min(l.batch, remaining)
	small, forWriter := l.watch.yielding()
	yielded := forWriter && p.yieldBatchSize() < limit64
	if small {
		limit64 = min(limit64, p.yieldBatchSize())
	}
	limit, err := toInt32(limit64)
	if err != nil {
		return true, fmt.Errorf("prune %s: limit: %w", p.Table, err)
	}
	if ok, err := l.pace.beforeBatch(ctx); err != nil || !ok {
		return true, wrapPace(p, err)
	}
	l.cursor.full = false
	saved := *l.cursor
	n, err := l.run(ctx, l.db, BatchParams{WindowDays: l.window, Limit: limit, Cursor: l.cursor})
	if _, werr := l.watch.observe(ctx, n > 0 || err != nil); werr != nil && err == nil && ctx.Err() == nil {
		return true, fmt.Errorf("prune %s: after batch %d: %w", p.Table, l.rep.Batches+1, werr)
	}
	if err != nil {
		*l.cursor = saved // the batch's keys are not done: the retry covers them again
		return l.failed(ctx, err)
	}
	l.consecutive = 0
	l.rep.Batches++
	if yielded {
		l.rep.Yielded++
	}
	l.rep.Deleted += n
	failpoint.Inject(failpoint.SweepAfterBatch)
	if n < limit64 && !l.cursor.full {
		// A short batch: nothing eligible is left. (One that covered a
		// whole batch of keys but deleted fewer, because a concurrent
		// replay made some ineligible, goes on: more may remain.)
		return true, nil
	}
	ok, err := l.pace.afterBatch(ctx)
	return err != nil || !ok, wrapPace(p, err)
}

// wrapPace names the table in a pacing error (nil stays nil).
func wrapPace(p Policy, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("prune %s: pacing: %w", p.Table, err)
}

// failed handles a failed batch: a timeout is retried, after
// MaxConsecutiveTimeouts in a row at the reduced batch size, and after as
// many more the prune gives up; any other error ends the prune.
func (l *pruneLoop) failed(ctx context.Context, err error) (done bool, _ error) {
	p := l.p
	if !isTimeout(err) || ctx.Err() != nil {
		return true, fmt.Errorf("prune %s: batch %d: %w", p.Table, l.rep.Batches+1, err)
	}
	l.rep.Timeouts++
	l.consecutive++
	if l.consecutive < MaxConsecutiveTimeouts {
		return false, nil
	}
	if l.rep.Reduced {
		return true, fmt.Errorf("prune %s: %w: %d in a row at the reduced batch size %d: %w",
			p.Table, ErrBatchTimeouts, l.consecutive, l.batch, err)
	}
	l.rep.Reduced, l.batch, l.consecutive = true, p.reducedBatchSize(), 0
	return false, nil
}

// runBatch runs one batch delete off a Session (on a pool, or inside the
// caller's transaction); with timeouts set, inside its own transaction whose
// SET LOCAL settings bound it on the server.
func (p Policy) runBatch(ctx context.Context, db DB, params BatchParams) (int64, error) {
	if p.StatementTimeout == 0 && p.LockTimeout == 0 {
		return p.DeleteBatch(ctx, db, params)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// set_config(..., true) is SET LOCAL with a bound parameter (in ms). A
	// timeout left at 0 is not set: the batch keeps the server's (role's,
	// session's) setting, as the Policy documents.
	var sets []string
	var args []any
	if p.GenericPlans {
		sets = append(sets, "set_config('plan_cache_mode', 'force_generic_plan', true)")
	}
	if _, nested := db.(pgx.Tx); !nested {
		// The batch's own commit need not wait for the WAL flush (see
		// Policy.StatementTimeout); inside the caller's transaction the
		// setting would reach the caller's commit, so it is left alone.
		sets = append(sets, "set_config('synchronous_commit', 'off', true)")
	}
	for _, st := range []struct {
		name string
		d    time.Duration
	}{{"statement_timeout", p.StatementTimeout}, {"lock_timeout", p.LockTimeout}} {
		if st.d > 0 {
			args = append(args, serverMillis(st.d))
			sets = append(sets, fmt.Sprintf("set_config('%s', $%d, true)", st.name, len(args)))
		}
	}
	if _, err := tx.Exec(ctx, "SELECT "+strings.Join(sets, ", "), args...); err != nil {
		return 0, fmt.Errorf("set batch timeouts: %w", err)
	}
	n, err := p.DeleteBatch(ctx, tx, params)
	if err != nil {
		return 0, err
	}
	if err := commitDestroyed(ctx, tx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
}

// txStatusIdle is the ReadyForQuery status of a session outside any
// transaction block.
const txStatusIdle = 'I'

// SQLSTATEs of a batch that ran out of time on the server.
const (
	sqlStateQueryCanceled    = "57014" // statement_timeout
	sqlStateLockNotAvailable = "55P03" // lock_timeout
)

func isTimeout(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == sqlStateQueryCanceled || pgErr.Code == sqlStateLockNotAvailable
}

// ErrOutOfRange is returned (wrapped) when a value does not fit the type a
// query binds it as.
var ErrOutOfRange = errors.New("value out of range")

func toInt32(v int64) (int32, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %d does not fit int32", ErrOutOfRange, v)
	}
	return int32(v), nil
}
