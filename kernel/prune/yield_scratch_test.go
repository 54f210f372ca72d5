//go:build scratch

package prune_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

// TestPruneYieldsToWriters: another session commits a write while every batch
// runs (as a service staging events does). The first batch runs at the full
// size (nobody was seen yet); every later one at the reduced size, and the
// run still deletes everything eligible and nothing else. On one connection
// and on a pool alike.
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
			p.BatchSize = 100 // reduced: 10
			log := &batchLog{}
			log.before = func(int) {
				// A fresh event staged and committed by another session.
				db.Exec(t, `INSERT INTO event_outbox (event_type, payload) VALUES ('case.written', '{}')`)
			}
			rep, err := prune.PruneTable(ctx, on, log.wrap(p))
			require.NoError(t, err)
			require.Equal(t, int64(250), rep.Deleted)
			require.Equal(t, int32(100), log.limits[0], "nobody seen yet: full size")
			for i, l := range log.limits[1:] {
				require.Equal(t, int32(10), l, "batch %d: another session wrote during the previous one", i+2)
			}
			require.Equal(t, 1+15+1, rep.Batches, "100, then 15 of 10, then a short one")
			require.Equal(t, rep.Batches-1, rep.Yielded)
			require.Zero(t, countOutbox(t, db, kindAgedPublished))
			require.Equal(t, int64(3), countOutbox(t, db, kindAgedPending), "pending rows kept")
			require.Equal(t, int64(rep.Batches), countOutbox(t, db, "case.written"), "fresh rows kept")
			requireSessionUntouched(ctx, t, on)
		})
	}
}
