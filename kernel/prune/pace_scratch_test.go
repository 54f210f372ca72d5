package prune_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

// pauseSignal is a Pacing.Paused hook that counts the waits per reason and
// signals the first one.
type pauseSignal struct {
	waits atomic.Int64
	first chan string
}

func newPauseSignal() *pauseSignal { return &pauseSignal{first: make(chan string, 1)} }

func (s *pauseSignal) hook(reason string, _ time.Duration) {
	if s.waits.Add(1) == 1 {
		s.first <- reason
	}
}

// waitFor waits until the hook has been told of n more waits.
func (s *pauseSignal) waitFor(ctx context.Context, t *testing.T, n int64) {
	t.Helper()
	target := s.waits.Load() + n
	for s.waits.Load() < target {
		select {
		case <-ctx.Done():
			t.Fatalf("the prune stopped waiting: %d of %d waits", s.waits.Load(), target)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestPrunePausesForLaggingReplica, with a REAL streaming
// replica (go tool mage replica:up) whose replay the test pauses: the
// drain's batches stop once the replica's replay lag passes the bound, no
// row goes while it waits, and the drain resumes and finishes when replay
// resumes. Then, with a pause budget, a call that waits it out ends early,
// says why, and leaves the rest for the next cycle. Not parallel: the
// replica is the server's, one for every test.
func TestPrunePausesForLaggingReplica(t *testing.T) {
	replica := kerneltest.Replica(t)
	ctx, b := setup(t, sweep.TransportConfig{})
	const rows = 30_000
	insertOutbox(t, b.db, kindAgedPublished, rows, 40, true)

	t.Run("PauseAndResume", func(t *testing.T) {
		_, err := replica.Exec(ctx, "SELECT pg_wal_replay_pause()")
		require.NoError(t, err)
		sig := newPauseSignal()
		p := b.outbox
		p.BatchSize, p.CycleCap = 200, rows
		p.Pacing = prune.Pacing{MaxReplicaLag: 200 * time.Millisecond, MaxPause: 45 * time.Second, Paused: sig.hook}
		type result struct {
			rep prune.Report
			err error
		}
		done := make(chan result, 1)
		go func() {
			rep, err := prune.PruneTable(ctx, b.db.Pool, p)
			done <- result{rep, err}
		}()
		select {
		case reason := <-sig.first:
			require.Equal(t, prune.PauseReplicaLag, reason)
		case r := <-done:
			t.Fatalf("the drain finished without waiting for the paused replica: %+v, %v", r.rep, r.err)
		}
		left := countOutbox(t, b.db, kindAgedPublished)
		require.Positive(t, left, "the drain stopped before the end")
		sig.waitFor(ctx, t, 10) // ten more polls, the replica still paused
		require.Equal(t, left, countOutbox(t, b.db, kindAgedPublished), "no batch while the replica lags")

		_, err = replica.Exec(ctx, "SELECT pg_wal_replay_resume()")
		require.NoError(t, err)
		r := <-done
		require.NoError(t, r.err)
		require.Empty(t, r.rep.PauseExhausted)
		require.Positive(t, r.rep.PausedReplicaLag)
		require.Greater(t, r.rep.MaxReplicaLagSeen, p.Pacing.MaxReplicaLag)
		require.Equal(t, int64(rows), r.rep.Deleted, "one call: every row, before and after the pause")
		require.Zero(t, countOutbox(t, b.db, kindAgedPublished), "resumed and finished")
		t.Logf("paused %v at a lag of up to %v; deleted %d rows in %d batches", r.rep.PausedReplicaLag, r.rep.MaxReplicaLagSeen, r.rep.Deleted, r.rep.Batches)
	})

	t.Run("PauseBudget", func(t *testing.T) {
		insertOutbox(t, b.db, kindAgedPublished, rows, 40, true)
		_, err := replica.Exec(ctx, "SELECT pg_wal_replay_pause()")
		require.NoError(t, err)
		p := b.outbox
		p.BatchSize, p.CycleCap = 200, rows
		p.Pacing = prune.Pacing{MaxReplicaLag: 200 * time.Millisecond, MaxPause: 500 * time.Millisecond}
		rep, err := prune.PruneTable(ctx, b.db.Pool, p)
		require.NoError(t, err, "waiting out the budget is not a failure")
		require.Equal(t, prune.PauseReplicaLag, rep.PauseExhausted, "the call says why it ended early")
		require.InDelta(t, p.Pacing.MaxPause.Seconds(), rep.PausedReplicaLag.Seconds(), 0.15, "it waited its budget, no more")
		require.Less(t, rep.Deleted, int64(rows), "the rest is the next cycle's")
		require.False(t, rep.Capped)
		require.Equal(t, int64(rows)-rep.Deleted, countOutbox(t, b.db, kindAgedPublished))
		_, err = replica.Exec(ctx, "SELECT pg_wal_replay_resume()")
		require.NoError(t, err)
	})
}

// TestPrunePacesItsWAL: with a WAL rate bound the drain sleeps between
// batches so that the WAL it wrote never gets ahead of the rate: the call
// takes at least its WAL over the rate, less one batch's worth.
func TestPrunePacesItsWAL(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	insertOutbox(t, b.db, kindAgedPublished, 6_000, 40, true)
	sig := newPauseSignal()
	p := b.outbox
	p.BatchSize = 500
	const rate = 256 << 10 // 256 KiB/s: over a second for these rows' WAL
	p.Pacing = prune.Pacing{MaxWALBytesPerSecond: rate, MaxPause: time.Minute, Paused: sig.hook}
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, int64(6_000), rep.Deleted)
	require.Positive(t, rep.WALBytes)
	require.Positive(t, rep.PausedWALRate)
	require.Equal(t, prune.PauseWALRate, <-sig.first)
	perBatch := rep.WALBytes / int64(rep.Batches)
	floor := time.Duration(float64(rep.WALBytes-perBatch) / rate * float64(time.Second))
	require.GreaterOrEqual(t, rep.Duration, floor, "%d WAL bytes at %d bytes/s", rep.WALBytes, rate)
	t.Logf("%d rows, %d WAL bytes in %v (paused %v): %.0f bytes/s", rep.Deleted, rep.WALBytes, rep.Duration, rep.PausedWALRate, float64(rep.WALBytes)/rep.Duration.Seconds())
}
