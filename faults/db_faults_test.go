//go:build faults

package faults_test

import (
	"context"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/pgsession"
)

// poolPingAfter is just over pgxpool's default idle time after which an
// acquired connection is pinged first.
const poolPingAfter = 1100 * time.Millisecond

// passBound is how long an archive pass may take to give up on a database
// that was cut off under it.
const passBound = 30 * time.Second

// enginePool is a pool of the world's database for the engine alone (its
// sessions are named, so a scenario can terminate exactly them), through
// host when it is not empty.
func enginePool(t *testing.T, w *rulesWorld, host string) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(w.db.URL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", "craig-faults-engine")
	q.Set("connect_timeout", "5")
	u.RawQuery = q.Encode()
	if host != "" {
		u.Host = host
	}
	pool, err := pgsession.NewPool(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestDatabaseTerminated: the engine's sessions (the lease's and the
// pool's) terminated by pg_terminate_backend at a seeded-random moment of a
// pass, rounds times: the pass ends within its bound with an error or a
// stopped table, never a partial batch (nothing lost, no ledger row
// without its objects), the lock is free, and the next pass succeeds.
func TestDatabaseTerminated(t *testing.T) {
	t.Parallel()
	w := newRulesWorld(t)
	pool := enginePool(t, w, "")
	eng := engineOn(t, w, pool)
	tl := newTally("database", "pg_terminate_backend")
	rng := rand.New(rand.NewPCG(14, 21))
	for round := range rounds(t) {
		if w.aged(t) < 1500 {
			w.seed(t, 2000, 10)
		}
		done := make(chan error, 1)
		go func() {
			rep, err := eng.RunPass(context.Background(), 20)
			if err == nil {
				err = rep.Err()
			}
			done <- err
		}()
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
		var killed int
		require.NoError(t, w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'craig-faults-engine') k`).Scan(&killed))
		select {
		case <-done:
		case <-time.After(passBound):
			t.Fatalf("round %d: the pass did not end within %v after its sessions were terminated", round, passBound)
		}
		tl.Rounds++
		tl.Faults["terminated_sessions"] += killed
		waitNoEngineSessions(t, w)
		check(t, w.World, tl, faults.CheckOptions{})
		// The next pass comes at the next interval (at least a second in
		// serve), when the pool pings the connections idle since the kill
		// (pgxpool pings one idle for over a second) and replaces the dead.
		time.Sleep(poolPingAfter)
		rep, err := eng.RunPass(context.Background(), 1)
		require.NoError(t, err, "round %d: the next pass", round)
		require.NoError(t, rep.Err(), "round %d: the next pass succeeds", round)
	}
	tl.write(t)
}

// TestDatabaseFrozen: the database stops answering in the middle of a pass
// (a TCP proxy that forwards nothing and closes nothing): the pass gives up
// within its bound with an error, and once the database answers again the
// lock is free and the next pass succeeds with nothing lost.
func TestDatabaseFrozen(t *testing.T) {
	t.Parallel()
	w := newRulesWorld(t)
	u, err := url.Parse(w.db.URL)
	require.NoError(t, err)
	proxy, err := faults.NewTCPProxy(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	pool := enginePool(t, w, proxy.Addr)
	eng := engineOn(t, w, pool)
	tl := newTally("database", "frozen")
	rng := rand.New(rand.NewPCG(14, 22))
	for round := range max(3, rounds(t)/4) {
		if w.aged(t) < 1500 {
			w.seed(t, 2000, 10)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			rep, err := eng.RunPass(context.Background(), 20)
			if err == nil {
				err = rep.Err()
			}
			done <- err
		}()
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		proxy.Freeze()
		select {
		case err := <-done:
			t.Logf("round %d: the pass ended %v after it started: %v", round, time.Since(start).Round(time.Millisecond), err)
			if err != nil {
				tl.Faults["passes_ended_by_the_bound"]++
			}
		case <-time.After(passBound):
			proxy.Thaw()
			t.Fatalf("round %d: the pass did not give up within %v of the database freezing", round, passBound)
		}
		proxy.Thaw()
		tl.Rounds++
		tl.Faults["frozen"]++
		waitNoEngineSessions(t, w)
		check(t, w.World, tl, faults.CheckOptions{})
		rep, err := eng.RunPass(context.Background(), 1)
		require.NoError(t, err, "round %d", round)
		require.NoError(t, rep.Err(), "round %d: the next pass succeeds", round)
	}
	tl.write(t)
}

func engineOn(t *testing.T, w *rulesWorld, pool *pgxpool.Pool) *archive.Engine {
	t.Helper()
	return faultyEngine(t, &rulesWorld{World: &faults.World{Pool: pool, Store: w.Store, SubjectKey: w.SubjectKey}, db: w.db, bucket: w.bucket, url: w.url}, w.Store)
}

// waitNoEngineSessions waits until the server has ended every terminated
// engine session that held the lease (a lock is released when its backend
// exits).
func waitNoEngineSessions(t *testing.T, w *rulesWorld) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		_ = w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
		return n == 0
	}, passBound, 20*time.Millisecond, "the archive lease is released")
}
