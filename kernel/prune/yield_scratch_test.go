package prune_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

// TestPruneYieldsToWriters: another session commits a write while every batch
// runs (as a service staging events does). Every batch runs at the reduced
// size: the first within prune.YieldProbe (which the first batch waits out,
// so that every later batch is small only because the writer was seen), the
// rest because the writer was seen. The run still deletes everything
// eligible and nothing else. On one connection and on a pool alike.
//
// The converse (no other writer: full batches throughout) is not asserted
// here: the test server is shared with parallel tests whose writes the watch
// rightly sees. TestYieldWatch covers it with a scripted horizon, and the
// bench's drain scenario shows it at full size.
func TestPruneYieldsToWriters(t *testing.T) {
	t.Parallel()
	for _, place := range places {
		t.Run(place, func(t *testing.T) {
			t.Parallel()
			ctx, bundle := setup(t, sweep.TransportConfig{YieldToWriters: true})
			db := bundle.db
			insertOutbox(t, db, kindAgedPublished, 250, 31, true)
			insertOutbox(t, db, kindAgedPending, 3, 31, false)
			on := runOn(ctx, t, db, place)

			p := bundle.outbox
			require.True(t, p.YieldToWriters)
			p.BatchSize = 500 // yield: a hundredth, 5
			log := &batchLog{}
			log.before = func(call int) {
				if call == 1 {
					time.Sleep(prune.YieldProbe) // the clock must pass the probe window
				}
				// A fresh event staged and committed by another session.
				db.Exec(t, `INSERT INTO event_outbox (event_type, payload) VALUES ('case.written', '{}')`)
			}
			rep, err := prune.PruneTable(ctx, on, log.wrap(p))
			require.NoError(t, err)
			require.Equal(t, int64(250), rep.Deleted)
			for i, l := range log.limits {
				require.Equal(t, int32(5), l, "batch %d: another session is writing", i+1)
			}
			require.Equal(t, 50+1, rep.Batches, "50 of 5, then a short one")
			require.Equal(t, rep.Batches-1, rep.Yielded, "the first batch was small for the probe window, the rest for the writer")
			require.Zero(t, countOutbox(t, db, kindAgedPublished))
			require.Equal(t, int64(3), countOutbox(t, db, kindAgedPending), "pending rows kept")
			require.Equal(t, int64(rep.Batches), countOutbox(t, db, "case.written"), "fresh rows kept")
			requireSessionUntouched(ctx, t, on)
		})
	}
}
