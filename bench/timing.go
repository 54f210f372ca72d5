package bench

import (
	"context"
	"sync"
	"time"

	"github.com/craig/retention/kernel/prune"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// batchTimer wraps the prune.DB the kernel runs on and records how long every
// batch held its locks: from BEGIN to the end of COMMIT (or ROLLBACK) for a
// batch in its own transaction, the statement itself for one that
// autocommits. It changes nothing the kernel does.
type batchTimer struct {
	prune.DB
	mu      sync.Mutex
	batches []time.Duration
}

func (b *batchTimer) record(d time.Duration) {
	b.mu.Lock()
	b.batches = append(b.batches, d)
	b.mu.Unlock()
}

// durations returns the recorded batch durations.
func (b *batchTimer) durations() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.batches...)
}

// PgConn exposes the session of the connection the timer wraps (the bench
// always wraps one *pgx.Conn), so that the kernel takes the same path as on
// the sweep's own lease connection (prune.Session).
func (b *batchTimer) PgConn() *pgconn.PgConn { return b.DB.(prune.Session).PgConn() }

func (b *batchTimer) Begin(ctx context.Context) (pgx.Tx, error) {
	start := time.Now()
	tx, err := b.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &timedTx{Tx: tx, start: start, rec: b}, nil
}

// BeginTx is Begin with options (partition retirement pins READ
// COMMITTED), timed alike; the wrapped connection always has it.
func (b *batchTimer) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	start := time.Now()
	tx, err := b.DB.(*pgx.Conn).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &timedTx{Tx: tx, start: start, rec: b}, nil
}

func (b *batchTimer) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	start := time.Now()
	tag, err := b.DB.Exec(ctx, sql, args...)
	b.record(time.Since(start))
	return tag, err
}

func (b *batchTimer) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	start := time.Now()
	return &timedRow{Row: b.DB.QueryRow(ctx, sql, args...), start: start, rec: b}
}

// timedTx records its lifetime once, at COMMIT or ROLLBACK (the kernel
// defers a ROLLBACK after its COMMIT; only the first end counts).
type timedTx struct {
	pgx.Tx
	start time.Time
	rec   *batchTimer
	done  bool
}

func (t *timedTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.finish()
	return err
}

func (t *timedTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.finish()
	return err
}

func (t *timedTx) finish() {
	if !t.done {
		t.done = true
		t.rec.record(time.Since(t.start))
	}
}

// timedRow records an autocommitted single-row statement when it is read.
type timedRow struct {
	pgx.Row
	start time.Time
	rec   *batchTimer
}

func (r *timedRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	r.rec.record(time.Since(r.start))
	return err
}
