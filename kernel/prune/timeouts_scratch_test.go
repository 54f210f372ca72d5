package prune_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

// Per-batch timeouts of the tests: a lock wait gives up after 50 ms, far
// below the statement timeout, so every timeout here is a lock timeout
// (55P03) and a run that waited for the statement timeout would show.
const (
	testLockTimeout      = 50 * time.Millisecond
	testStatementTimeout = 5 * time.Second
)

// locker is another session holding a lock in an open transaction until
// release (or the test's end).
type locker struct {
	tx      pgx.Tx
	once    sync.Once
	release func()
}

// holdTableLock takes ACCESS EXCLUSIVE on table in another session, as a
// migration or a VACUUM FULL would: every batch delete must wait for it.
func holdTableLock(ctx context.Context, t *testing.T, db *kerneltest.DB, table string) *locker {
	t.Helper()
	return holdLock(ctx, t, db, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
}

// holdRowLocks locks the outbox rows of a kind FOR UPDATE in another
// session, as a replay or a drain claim does.
func holdRowLocks(ctx context.Context, t *testing.T, db *kerneltest.DB, kind string) *locker {
	t.Helper()
	return holdLock(ctx, t, db, "SELECT id FROM event_outbox WHERE event_type = '"+kind+"' FOR UPDATE")
}

func holdLock(ctx context.Context, t *testing.T, db *kerneltest.DB, stmt string) *locker {
	t.Helper()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, stmt)
	require.NoError(t, err)
	l := &locker{tx: tx}
	l.release = func() {
		l.once.Do(func() {
			require.NoError(t, tx.Rollback(context.Background()))
			require.NoError(t, conn.Close(context.Background()))
		})
	}
	t.Cleanup(l.release)
	return l
}

// batchLog wraps a policy's batch delete: it records the limit of every call
// and the error it returned, and runs before(call) first when set.
type batchLog struct {
	mu     sync.Mutex
	limits []int32
	errs   []error
	before func(call int)
}

func (b *batchLog) wrap(p prune.Policy) prune.Policy {
	inner := p.DeleteBatch
	p.DeleteBatch = func(ctx context.Context, db prune.DB, bp prune.BatchParams) (int64, error) {
		b.mu.Lock()
		b.limits = append(b.limits, bp.Limit)
		call := len(b.limits)
		b.mu.Unlock()
		if b.before != nil {
			b.before(call)
		}
		n, err := inner(ctx, db, bp)
		b.mu.Lock()
		b.errs = append(b.errs, err)
		b.mu.Unlock()
		return n, err
	}
	return p
}

// Where a test runs PruneTable: a pool (each batch in its own transaction
// with SET LOCAL settings) or one connection, as the sweep's lease
// connection is (settings for the session, put back after the call).
const (
	onPool = "Pool"
	onConn = "Conn"
)

var places = []string{onPool, onConn}

// runOn returns the prune.DB of place for db; a connection is closed at the
// test's end.
func runOn(ctx context.Context, t *testing.T, db *kerneltest.DB, place string) prune.DB {
	t.Helper()
	if place == onPool {
		return db.Pool
	}
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// readBatchSettings reads the settings a batch runs with, as a session reports
// them: statement_timeout, lock_timeout, synchronous_commit, plan_cache_mode.
const readBatchSettings = "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), current_setting('synchronous_commit'), current_setting('plan_cache_mode')"

func batchSettings(ctx context.Context, d prune.DB) ([]string, error) {
	v := make([]string, 4)
	err := d.QueryRow(ctx, readBatchSettings).Scan(&v[0], &v[1], &v[2], &v[3])
	return v, err
}

// requireSessionBack checks that a connection PruneTable ran on has want
// back (the batchSettings order) and no transaction open.
func requireSessionBack(ctx context.Context, t *testing.T, d prune.DB, want []string) {
	t.Helper()
	conn, ok := d.(*pgx.Conn)
	if !ok {
		return
	}
	got, err := batchSettings(ctx, conn)
	require.NoError(t, err)
	require.Equal(t, want, got, "the session's own settings are back")
	require.Equal(t, byte('I'), conn.PgConn().TxStatus(), "no transaction is left open")
}

// requireSessionUntouched checks that a connection PruneTable ran on has the
// server's settings back and no transaction open.
func requireSessionUntouched(ctx context.Context, t *testing.T, d prune.DB) {
	t.Helper()
	requireSessionBack(ctx, t, d, []string{"0", "0", "on", "auto"})
}

func withTimeouts(p prune.Policy, batch int) prune.Policy {
	p.BatchSize = batch
	p.LockTimeout = testLockTimeout
	p.StatementTimeout = testStatementTimeout
	return p
}

func requireLockTimeouts(t *testing.T, errs []error, n int) {
	t.Helper()
	require.GreaterOrEqual(t, len(errs), n)
	for i, err := range errs[:n] {
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "batch %d", i+1)
		require.Equal(t, "55P03", pgErr.Code, "batch %d: lock_timeout, not statement_timeout", i+1)
	}
}

// TestPruneBatchTimeoutsGiveUp: another session holds a lock every batch
// needs for the whole run. Three batches time out, the loop drops to the
// reduced batch size, three more time out, and the table is given up for
// the cycle with nothing deleted.
func TestPruneBatchTimeoutsGiveUp(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		eligible int
		lock     func(context.Context, *testing.T, *kerneltest.DB) *locker
	}{
		{
			name: "TableLock", eligible: 250,
			lock: func(ctx context.Context, t *testing.T, db *kerneltest.DB) *locker {
				return holdTableLock(ctx, t, db, sweep.OutboxTable)
			},
		},
		{
			// The only eligible row is locked: every batch selects it and
			// its DELETE waits on the row.
			name: "RowLock", eligible: 1,
			lock: func(ctx context.Context, t *testing.T, db *kerneltest.DB) *locker {
				return holdRowLocks(ctx, t, db, kindAgedPublished)
			},
		},
	}
	for _, tt := range tests {
		for _, place := range places {
			t.Run(tt.name+"/"+place, func(t *testing.T) {
				t.Parallel()
				ctx, bundle := setup(t, sweep.TransportConfig{})
				db := bundle.db
				insertOutbox(t, db, kindAgedPublished, tt.eligible, 31, true)
				insertOutbox(t, db, kindAgedPending, 3, 31, false)
				on := runOn(ctx, t, db, place)
				l := tt.lock(ctx, t, db)

				log := &batchLog{}
				rep, err := prune.PruneTable(ctx, on, log.wrap(withTimeouts(bundle.outbox, 100)))
				require.ErrorIs(t, err, prune.ErrBatchTimeouts)
				require.ErrorContains(t, err, "prune event_outbox")
				require.Equal(t, 6, rep.Timeouts)
				require.True(t, rep.Reduced)
				require.Zero(t, rep.Deleted)
				require.Zero(t, rep.Batches)
				require.Equal(t, []int32{100, 100, 100, 10, 10, 10}, log.limits, "three at the batch size, three at a tenth of it")
				requireLockTimeouts(t, log.errs, 6)
				require.Less(t, rep.Duration, testStatementTimeout, "each batch gave up after the lock timeout")

				l.release() // an ACCESS EXCLUSIVE lock would block the counts too
				require.Equal(t, int64(tt.eligible), countOutbox(t, db, kindAgedPublished), "nothing deleted")
				require.Equal(t, int64(3), countOutbox(t, db, kindAgedPending))
				requireSessionUntouched(ctx, t, on)
			})
		}
	}
}

// TestPruneBatchTimeoutsRecover: the lock is released just as the loop
// falls back to the reduced batch size; the run completes at that size.
func TestPruneBatchTimeoutsRecover(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t, sweep.TransportConfig{})
	db := bundle.db
	insertOutbox(t, db, kindAgedPublished, 25, 31, true)
	insertOutbox(t, db, kindFreshPublished, 4, 1, true)
	l := holdTableLock(ctx, t, db, sweep.OutboxTable)

	log := &batchLog{}
	log.before = func(call int) {
		// Call 4 is the first at the reduced size: three timed out.
		if call == prune.MaxConsecutiveTimeouts+1 {
			l.release()
		}
	}
	rep, err := prune.PruneTable(ctx, db.Pool, log.wrap(withTimeouts(bundle.outbox, 100)))
	require.NoError(t, err)
	require.True(t, rep.Reduced)
	require.Equal(t, 3, rep.Timeouts)
	require.Equal(t, int64(25), rep.Deleted)
	require.Equal(t, 3, rep.Batches, "10 + 10 + 5 at the reduced size")
	require.Equal(t, []int32{100, 100, 100, 10, 10, 10}, log.limits)
	requireLockTimeouts(t, log.errs, 3)
	for _, err := range log.errs[3:] {
		require.NoError(t, err)
	}
	require.Zero(t, countOutbox(t, db, kindAgedPublished))
	require.Equal(t, int64(4), countOutbox(t, db, kindFreshPublished))
}

// TestPruneBatchStatementTimeout: a batch that runs past statement_timeout
// is cancelled by the server and counts as a timeout like a lock wait.
func TestPruneBatchStatementTimeout(t *testing.T) {
	t.Parallel()
	for _, place := range places {
		t.Run(place, func(t *testing.T) {
			t.Parallel()
			ctx, bundle := setup(t, sweep.TransportConfig{})
			on := runOn(ctx, t, bundle.db, place)
			p := bundle.outbox
			p.BatchSize, p.StatementTimeout, p.LockTimeout = 100, 50*time.Millisecond, time.Second
			calls := 0
			p.DeleteBatch = func(ctx context.Context, db prune.DB, _ prune.BatchParams) (int64, error) {
				calls++
				// A batch that would take 10 s; the server cancels it at 50 ms.
				_, err := db.Exec(ctx, "SELECT pg_sleep(10)")
				return 0, err
			}
			rep, err := prune.PruneTable(ctx, on, p)
			require.ErrorIs(t, err, prune.ErrBatchTimeouts)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "57014", pgErr.Code)
			require.Equal(t, 6, rep.Timeouts)
			require.Equal(t, 6, calls)
			require.Less(t, rep.Duration, 10*time.Second)
			requireSessionUntouched(ctx, t, on)
		})
	}
}

// TestPruneBatchSettings: every batch statement sees the policy's settings
// (its non-zero timeouts, asynchronous commit, generic plans when the policy
// asks) and commits on its own. On one connection they are set for the
// session for the duration of the call and the session's own values are put
// back afterwards; on a pool each batch is a transaction of its own with SET
// LOCAL settings (none without timeouts).
func TestPruneBatchSettings(t *testing.T) {
	t.Parallel()

	type want struct {
		isTx                               bool
		statement, lock, syncCommit, plans string
	}
	tests := []struct {
		name      string
		place     string
		statement time.Duration
		lock      time.Duration
		want      want
	}{
		{name: "ConnBoth", place: onConn, statement: 5 * time.Second, lock: 50 * time.Millisecond,
			want: want{statement: "5s", lock: "50ms", syncCommit: "off", plans: "force_generic_plan"}},
		// A zero timeout leaves the session's (the server's) setting.
		{name: "ConnStatementOnly", place: onConn, statement: 1500 * time.Millisecond,
			want: want{statement: "1500ms", lock: "7s", syncCommit: "off", plans: "force_generic_plan"}},
		{name: "ConnLockOnly", place: onConn, lock: 250 * time.Millisecond,
			want: want{statement: "9s", lock: "250ms", syncCommit: "off", plans: "force_generic_plan"}},
		{name: "ConnNeither", place: onConn,
			want: want{statement: "9s", lock: "7s", syncCommit: "off", plans: "force_generic_plan"}},
		{name: "PoolBoth", place: onPool, statement: 5 * time.Second, lock: 50 * time.Millisecond,
			want: want{isTx: true, statement: "5s", lock: "50ms", syncCommit: "off", plans: "force_generic_plan"}},
		{name: "PoolNeither", place: onPool,
			want: want{statement: "0", lock: "0", syncCommit: "on", plans: "auto"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, bundle := setup(t, sweep.TransportConfig{})
			db := bundle.db
			insertOutbox(t, db, kindAgedPublished, 25, 31, true)

			on := runOn(ctx, t, db, tt.place)
			conn, isConn := on.(*pgx.Conn)
			if isConn {
				_, err := conn.Exec(ctx, "SET lock_timeout = '7s'")
				require.NoError(t, err)
				_, err = conn.Exec(ctx, "SET statement_timeout = '9s'")
				require.NoError(t, err)
			}

			type seen struct {
				want
				txid int64
			}
			var got []seen
			p := bundle.outbox
			require.True(t, p.GenericPlans, "the transport sweeps ask for generic plans")
			p.BatchSize, p.StatementTimeout, p.LockTimeout = 10, tt.statement, tt.lock
			inner := p.DeleteBatch
			p.DeleteBatch = func(ctx context.Context, d prune.DB, bp prune.BatchParams) (int64, error) {
				var s seen
				_, s.isTx = d.(pgx.Tx)
				v, err := batchSettings(ctx, d)
				if err != nil {
					return 0, err
				}
				s.statement, s.lock, s.syncCommit, s.plans = v[0], v[1], v[2], v[3]
				n, err := inner(ctx, d, bp)
				if err != nil {
					return n, err
				}
				if err := d.QueryRow(ctx, "SELECT txid_current()").Scan(&s.txid); err != nil {
					return 0, err
				}
				got = append(got, s)
				return n, nil
			}

			rep, err := prune.PruneTable(ctx, on, p)
			require.NoError(t, err)
			require.Equal(t, int64(25), rep.Deleted)
			require.Len(t, got, 3)
			txids := map[int64]bool{}
			for i, s := range got {
				require.Equal(t, tt.want, s.want, "batch %d", i+1)
				txids[s.txid] = true
			}
			if tt.want.isTx {
				require.Len(t, txids, 3, "one transaction per batch")
			}
			require.Zero(t, countOutbox(t, db, kindAgedPublished))

			requireSessionBack(ctx, t, on, []string{"9s", "7s", "on", "auto"})
		})
	}
}

// A failed batch in its own transaction (on a pool) rolls back: nothing it
// did survives.
func TestPruneBatchTransactionRollsBackOnError(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t, sweep.TransportConfig{})
	db := bundle.db
	insertOutbox(t, db, kindAgedPublished, 5, 31, true)

	boom := errors.New("boom")
	p := withTimeouts(bundle.outbox, 100)
	inner := p.DeleteBatch
	p.DeleteBatch = func(ctx context.Context, d prune.DB, bp prune.BatchParams) (int64, error) {
		if _, err := inner(ctx, d, bp); err != nil {
			return 0, err
		}
		return 0, boom // deleted inside the batch's transaction, then failed
	}
	_, err := prune.PruneTable(ctx, db.Pool, p)
	require.ErrorIs(t, err, boom)
	require.Equal(t, int64(5), countOutbox(t, db, kindAgedPublished), "the failed batch's delete was rolled back")
}

// On one connection a batch's statement commits on its own; a call that
// fails (or is cancelled) part-way still puts the session's settings back,
// so a pooled connection never keeps a sweep's timeouts.
func TestPruneSessionSettingsRestoredOnError(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t, sweep.TransportConfig{})
	db := bundle.db
	insertOutbox(t, db, kindAgedPublished, 250, 31, true)
	conn := runOn(ctx, t, db, onConn)

	boom := errors.New("boom")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	calls := 0
	p := withTimeouts(bundle.outbox, 100)
	inner := p.DeleteBatch
	p.DeleteBatch = func(ctx context.Context, d prune.DB, bp prune.BatchParams) (int64, error) {
		calls++
		n, err := inner(ctx, d, bp)
		if calls == 2 {
			cancel() // the shutdown arrives while the second batch is in flight
			return n, boom
		}
		return n, err
	}
	rep, err := prune.PruneTable(cctx, conn, p)
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, rep.Batches, "the first batch is reported")
	require.Equal(t, int64(100), rep.Deleted)
	require.Equal(t, int64(50), countOutbox(t, db, kindAgedPublished),
		"each batch statement committed on its own: the second batch's DELETE ran before its error")
	requireSessionUntouched(ctx, t, conn)
}
