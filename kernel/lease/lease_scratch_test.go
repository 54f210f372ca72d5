package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/migrations"
)

const testTimeout = 60 * time.Second

// testKey is the lock the tests contend for; each test has a database of its
// own, and advisory locks are per database, so parallel tests never meet.
const testKey = lease.TransportKey

type testBundle struct {
	db   *kerneltest.DB
	pool *pgxpool.Pool
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	db := kerneltest.NewDB(t, migrations.Transport())
	return ctx, &testBundle{db: db, pool: db.Pool}
}

// backendPID is the server process of conn's session.
func backendPID(ctx context.Context, t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

// holderOf returns the pid of the session holding the advisory lock key in
// this database, or 0 when nobody holds it.
func holderOf(ctx context.Context, t *testing.T, pool *pgxpool.Pool, key int64) int32 {
	t.Helper()
	var pid int32
	err := pool.QueryRow(ctx, `
		SELECT l.pid FROM pg_locks AS l
		JOIN pg_database AS d ON d.oid = l.database AND d.datname = current_database()
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND ((l.classid::bigint << 32) | l.objid::bigint) = $1`, key).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return pid
}

// waitSessionGone returns once the server process pid has left
// pg_stat_activity. A backend drops out of it only after its exit has
// released all its locks, so afterwards the lease's lock is observably free.
// (Closing the socket makes the backend exit asynchronously: the release is
// not yet visible when TryRun returns, see TestTryRunLockFreeWhenItReturns.)
func waitSessionGone(ctx context.Context, t *testing.T, pool *pgxpool.Pool, pid int32) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var alive bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive))
		if !alive {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %d still alive: %v", pid, ctx.Err())
		case <-tick.C:
		}
	}
}

// requireFree asserts a fresh TryRun gets the lease and runs its fn.
func requireFree(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ran := false
	acquired, err := lease.TryRun(ctx, pool, testKey, func(context.Context, *pgx.Conn) error {
		ran = true
		return nil
	})
	require.NoError(t, err)
	require.True(t, acquired, "the lease must be free again")
	require.True(t, ran)
}

func TestTryRun(t *testing.T) {
	t.Parallel()

	t.Run("RunsFnOnItsOwnConnectionHoldingTheLock", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		ran := false
		acquired, err := lease.TryRun(ctx, bundle.pool, testKey, func(ctx context.Context, conn *pgx.Conn) error {
			ran = true
			require.Equal(t, backendPID(ctx, t, conn), holderOf(ctx, t, bundle.pool, testKey),
				"fn runs on the session that holds the lock")
			return nil
		})
		require.NoError(t, err)
		require.True(t, acquired)
		require.True(t, ran)
	})

	t.Run("SecondRunnerSkipsWithoutBlocking", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		holding := make(chan int32, 1)
		release := make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			acquired, err := lease.TryRun(ctx, bundle.pool, testKey, func(ctx context.Context, conn *pgx.Conn) error {
				var pid int32
				if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				holding <- pid
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			})
			if err == nil && !acquired {
				err = errors.New("first runner did not get the lease")
			}
			firstDone <- err
		}()

		var firstPID int32
		select {
		case firstPID = <-holding:
		case err := <-firstDone:
			t.Fatalf("first runner ended early: %v", err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		require.Equal(t, firstPID, holderOf(ctx, t, bundle.pool, testKey))

		// The first runner holds the lease until release is closed, so a
		// second TryRun that waited for it would never return: returning at
		// all proves it did not block.
		secondRan := false
		acquired, err := lease.TryRun(ctx, bundle.pool, testKey, func(context.Context, *pgx.Conn) error {
			secondRan = true
			return nil
		})
		require.NoError(t, err)
		require.False(t, acquired)
		require.False(t, secondRan, "fn must not run without the lease")
		require.Equal(t, firstPID, holderOf(ctx, t, bundle.pool, testKey), "the holder is undisturbed")

		close(release)
		require.NoError(t, <-firstDone)
		waitSessionGone(ctx, t, bundle.pool, firstPID)
		requireFree(ctx, t, bundle.pool)
	})

	t.Run("KeysAreIndependent", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		acquired, err := lease.TryRun(ctx, bundle.pool, lease.TransportKey, func(ctx context.Context, _ *pgx.Conn) error {
			ran := false
			acquired, err := lease.TryRun(ctx, bundle.pool, lease.ArchiveKey, func(context.Context, *pgx.Conn) error {
				ran = true
				return nil
			})
			require.NoError(t, err)
			require.True(t, acquired, "another key is not fenced by the transport lease")
			require.True(t, ran)
			return nil
		})
		require.NoError(t, err)
		require.True(t, acquired)
	})

	t.Run("FreeAfterEarlyReturn", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		boom := errors.New("boom")
		var pid int32
		acquired, err := lease.TryRun(ctx, bundle.pool, testKey, func(ctx context.Context, conn *pgx.Conn) error {
			pid = backendPID(ctx, t, conn)
			require.Equal(t, pid, holderOf(ctx, t, bundle.pool, testKey))
			return boom
		})
		require.True(t, acquired)
		require.ErrorIs(t, err, boom, "fn's error is returned as is")

		waitSessionGone(ctx, t, bundle.pool, pid)
		require.Zero(t, holderOf(ctx, t, bundle.pool, testKey))
		requireFree(ctx, t, bundle.pool)
	})

	t.Run("FreeAfterPanic", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		var pid int32
		recovered := func() (r any) {
			defer func() { r = recover() }()
			_, _ = lease.TryRun(ctx, bundle.pool, testKey, func(ctx context.Context, conn *pgx.Conn) error {
				pid = backendPID(ctx, t, conn)
				require.Equal(t, pid, holderOf(ctx, t, bundle.pool, testKey))
				panic("boom")
			})
			return nil
		}()
		require.Equal(t, "boom", recovered, "the panic propagates")
		require.NotZero(t, pid)

		waitSessionGone(ctx, t, bundle.pool, pid)
		require.Zero(t, holderOf(ctx, t, bundle.pool, testKey))
		requireFree(ctx, t, bundle.pool)
	})

	t.Run("FreeAfterKilledConnection", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		holding := make(chan int32, 1)
		proceed := make(chan struct{})
		type result struct {
			acquired bool
			err      error
		}
		firstDone := make(chan result, 1)
		go func() {
			acquired, err := lease.TryRun(ctx, bundle.pool, testKey, func(ctx context.Context, conn *pgx.Conn) error {
				var pid int32
				if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				holding <- pid
				select {
				case <-proceed:
				case <-ctx.Done():
				}
				_, err := conn.Exec(ctx, "SELECT 1") // the session is gone by now
				return err
			})
			firstDone <- result{acquired, err}
		}()

		var pid int32
		select {
		case pid = <-holding:
		case r := <-firstDone:
			t.Fatalf("first runner ended early: %+v", r)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		require.Equal(t, pid, holderOf(ctx, t, bundle.pool, testKey))

		// Kill the lease's session from another connection; the timeout form
		// waits until the backend has actually exited.
		var terminated bool
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&terminated))
		require.True(t, terminated)

		// The lock died with the session, even though the holder's fn is
		// still running: another runner gets it now.
		require.Zero(t, holderOf(ctx, t, bundle.pool, testKey))
		requireFree(ctx, t, bundle.pool)

		close(proceed)
		r := <-firstDone
		require.True(t, r.acquired)
		require.Error(t, r.err, "fn sees its connection gone")

		requireFree(ctx, t, bundle.pool)
	})

	t.Run("LeaseConnectionNeverReturnsToThePool", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		pool := bundle.pool

		// Warm the pool so TryRun has idle connections to take.
		warm := make([]*pgxpool.Conn, 3)
		for i := range warm {
			c, err := pool.Acquire(ctx)
			require.NoError(t, err)
			warm[i] = c
		}
		for _, c := range warm {
			c.Release()
		}
		before := pool.Stat().TotalConns()

		var pids []int32
		for range 5 {
			acquired, err := lease.TryRun(ctx, pool, testKey, func(ctx context.Context, conn *pgx.Conn) error {
				pids = append(pids, backendPID(ctx, t, conn))
				return nil
			})
			require.NoError(t, err)
			require.True(t, acquired)
			require.Zero(t, pool.Stat().AcquiredConns(), "TryRun leaves nothing checked out")
			require.LessOrEqual(t, pool.Stat().TotalConns(), before, "the hijacked connection is not counted by the pool any more")
			// Every lease session ends before the next TryRun starts.
			waitSessionGone(ctx, t, pool, pids[len(pids)-1])
		}

		// None of the pool's connections is a lease session.
		idle := pool.AcquireAllIdle(ctx)
		for _, c := range idle {
			require.NotContains(t, pids, c.Conn().PgConn().PID())
			c.Release()
		}

		// Server side: this database's sessions are exactly the pool's.
		var sessions int32
		require.NoError(t, pool.QueryRow(ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'").Scan(&sessions))
		require.Equal(t, pool.Stat().TotalConns(), sessions)
	})

	t.Run("CancelledContextDoesNotRunFn", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ran := false
		acquired, err := lease.TryRun(cctx, bundle.pool, testKey, func(context.Context, *pgx.Conn) error {
			ran = true
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, acquired)
		require.False(t, ran)
		require.Zero(t, holderOf(ctx, t, bundle.pool, testKey))
	})
}

// TestTryRunLockFreeWhenItReturns pins that the lease is free as soon as
// TryRun has returned, as its doc says ("The connection is closed before
// TryRun returns (or panics), which releases the lock"): a runner that asks
// again right away, from a session that is already open, gets it.
//
// FAILS at the time of writing (reported to the lead, ~1 iteration in 3
// here): closing the socket makes the server backend exit ASYNCHRONOUSLY, so
// the lock is still held for a moment after TryRun returns. The proposed fix
// unlocks explicitly (pg_advisory_unlock on the lease connection) before
// closing it.
func TestTryRunLockFreeWhenItReturns(t *testing.T) {
	t.Parallel()

	ctx, bundle := setup(t)
	observer, err := pgx.Connect(ctx, bundle.db.URL)
	require.NoError(t, err)
	defer func() { _ = observer.Close(context.Background()) }()

	const rounds = 50
	stillHeld := 0
	for range rounds {
		acquired, err := lease.TryRun(ctx, bundle.pool, testKey, func(context.Context, *pgx.Conn) error { return nil })
		require.NoError(t, err)
		require.True(t, acquired)

		var got bool
		require.NoError(t, observer.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", testKey).Scan(&got))
		if !got {
			stillHeld++
			continue
		}
		var released bool
		require.NoError(t, observer.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", testKey).Scan(&released))
		require.True(t, released)
	}
	require.Zero(t, stillHeld, "lock still held right after TryRun returned in %d of %d rounds", stillHeld, rounds)
}

// TestHeld: Held reads pg_locks and never takes the lock, for positive and
// negative keys (the high bit set).
func TestHeld(t *testing.T) {
	t.Parallel()
	for _, key := range []int64{testKey, -0x1234_5678_9abc_def0, 1, -1} {
		ctx, b := setup(t)
		held, err := lease.Held(ctx, b.pool, key)
		require.NoError(t, err)
		require.False(t, held, "key %#x free", key)
		acquired, err := lease.TryRun(ctx, b.pool, key, func(ctx context.Context, _ *pgx.Conn) error {
			held, err := lease.Held(ctx, b.pool, key)
			require.NoError(t, err)
			require.True(t, held, "key %#x held by TryRun", key)
			other, err := lease.Held(ctx, b.pool, key^1)
			require.NoError(t, err)
			require.False(t, other, "another key is not held")
			return nil
		})
		require.NoError(t, err)
		require.True(t, acquired)
		held, err = lease.Held(ctx, b.pool, key)
		require.NoError(t, err)
		require.False(t, held, "released")
	}
}
