package sweep_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/lease"
)

// TestDryRunNeverMakesARealSweepSkip: a dry run took
// each group's lease for a moment, so a real replica sweeping at that moment
// found it held and skipped its hourly cycle (lock_held). A dry run now
// reads pg_locks and never takes the lease: dry runs in a tight loop beside
// 200 real cycles make none of them skip. (On the old code the loop held the
// lease for a good part of the time and real cycles skipped.)
func TestDryRunNeverMakesARealSweepSkip(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	insertOutbox(t, bundle.db, "published", 50, 40, true)
	dry := bundle.sweeper(t, transport(0, 0))
	real := bundle.sweeper(t, transport(0, 0))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var dryRuns int
	var dryErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rep, err := dry.DryRun(ctx)
			if err != nil {
				dryErr = err
				return
			}
			if !rep.LockAcquired {
				continue // the real sweep held the lease: reported, not taken
			}
			dryRuns++
		}
	}()
	skipped := 0
	for range 200 {
		rep, err := real.RunOnce(ctx)
		require.NoError(t, err)
		if !rep.LockAcquired {
			skipped++
		}
	}
	close(stop)
	wg.Wait()
	require.NoError(t, dryErr)
	require.Positive(t, dryRuns, "the dry runs ran beside the real cycles")
	require.Zero(t, skipped, "no real cycle skipped because of a dry run")
}

// TestDryRunReportsAHeldLease: LockAcquired is false while another session
// holds a group's lease, and the dry run leaves it held.
func TestDryRunReportsAHeldLease(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	release := holdLock(ctx, t, bundle.db, lease.TransportKey)
	rep, err := bundle.sweeper(t, transport(0, 0)).DryRun(ctx)
	require.NoError(t, err)
	require.False(t, rep.LockAcquired)
	held, err := lease.Held(context.Background(), bundle.db.Pool, lease.TransportKey)
	require.NoError(t, err)
	require.True(t, held)
	release()
	rep, err = bundle.sweeper(t, transport(0, 0)).DryRun(ctx)
	require.NoError(t, err)
	require.True(t, rep.LockAcquired)
}
