package prune_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

// A cancel that reaches a call while
// the COMMIT of a transaction that destroyed rows is on its way left rows
// gone that no report counted (the commit went through on the server; the
// call, its context done, reported nothing, and the record of the detached
// tables went with the drop). The commit of a destroying transaction now
// completes whatever the call's context does.

// cancelAtDropCommit is a prune.DB whose transactions cancel the call's
// context as the one that dropped a table commits.
type cancelAtDropCommit struct {
	prune.DB
	cancel context.CancelFunc
}

func (d cancelAtDropCommit) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &cancelAtCommitTx{Tx: tx, cancel: d.cancel}, nil
}

type cancelAtCommitTx struct {
	pgx.Tx
	cancel  context.CancelFunc
	dropped bool
}

func (t *cancelAtCommitTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		t.dropped = t.dropped || strings.HasPrefix(q.SQL, "DROP TABLE")
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t *cancelAtCommitTx) Commit(ctx context.Context) error {
	if t.dropped {
		t.cancel()
	}
	return t.Tx.Commit(ctx)
}

// TestRetireCancelAtTheDropsCommit: the call is cancelled as its drop
// commits: the drop goes through and the call reports every partition and
// row it dropped; nothing is left detached or recorded.
func TestRetireCancelAtTheDropsCommit(t *testing.T) {
	t.Parallel()
	ctx, b := oldWeekPartitioned(t)
	p := b.outbox
	p.YieldToWriters = false // the detached partitions are dropped together, at the end of the call
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep, err := prune.PruneTable(cctx, cancelAtDropCommit{DB: b.db.Pool, cancel: cancel}, p)
	if err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
	require.Len(t, rep.Partitions.Dropped, 7, "a week of old partitions (the cap), reported")
	require.Equal(t, int64(20), rep.Partitions.DroppedRows)
	for d := 35; d <= 38; d++ {
		require.Zero(t, b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", dayName(d)))
	}
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions"))
}

// TestPruneCancelAtTheBatchCommit: the call is cancelled right after a
// batch's DELETE ran in its own transaction (the policy's timeouts set):
// the batch commits and the call reports its rows.
func TestPruneCancelAtTheBatchCommit(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	insertAt(t, b.db, kindAgedPublished, 25, 35, true)
	p := b.outbox
	p.BatchSize, p.YieldToWriters, p.StatementTimeout = 10, false, 10*time.Second
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := p.DeleteBatch
	p.DeleteBatch = func(ctx context.Context, db prune.DB, params prune.BatchParams) (int64, error) {
		n, err := run(ctx, db, params)
		cancel()
		return n, err
	}
	rep, err := prune.PruneTable(cctx, b.db.Pool, p)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int64(10), rep.Deleted, "the batch whose DELETE ran is committed and counted")
	require.Equal(t, int64(15), b.db.Count(t, "SELECT count(*) FROM event_outbox WHERE event_type = $1", kindAgedPublished))
}

// TestRetireCancelAnywhere: calls cancelled at seeded random moments while
// a writer commits, then one that runs to the end: every row retired is
// reported by exactly one call, each partition once; the partition holding
// an undelivered event stays with it; nothing is left detached.
func TestRetireCancelAnywhere(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(28, 3))
	for round := range 4 {
		cancels := []time.Duration{time.Duration(rng.IntN(300)) * time.Millisecond, time.Duration(rng.IntN(300)) * time.Millisecond, time.Duration(rng.IntN(300)) * time.Millisecond}
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			t.Parallel()
			ctx, b := setup(t, sweep.TransportConfig{})
			partitionOutbox(t, b.db, 40)
			var total int64
			for d := 31; d <= 40; d++ {
				insertAt(t, b.db, kindAgedPublished, d, d, true)
				total += int64(d)
			}
			insertAt(t, b.db, kindAgedPending, 1, 35, false)
			total -= 35 // day 35's published rows go by batches, not with its partition
			stopWriter := startWriter(ctx, t, b)
			p := b.outbox
			p.PartitionPace, p.YieldToWriters, p.MaxPartitions = 60*time.Millisecond, true, 20
			var reported int64
			seen := map[string]int{}
			count := func(rep prune.Report) {
				reported += rep.Partitions.DroppedRows
				for _, n := range rep.Partitions.Dropped {
					seen[n]++
				}
			}
			for _, after := range cancels {
				cctx, cancel := context.WithTimeout(ctx, after)
				rep, err := prune.PruneTable(cctx, b.db.Pool, p)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Logf("cancelled call: %v", err) // a cancel mid-statement surfaces as the server's or the driver's error
				}
				count(rep)
			}
			rep, err := prune.PruneTable(ctx, b.db.Pool, p)
			require.NoError(t, stopWriter())
			require.NoError(t, err)
			count(rep)
			for n, k := range seen {
				require.Equal(t, 1, k, "%s reported dropped %d times", n, k)
			}
			require.Equal(t, total, reported, "every retired row reported by one call")
			require.True(t, partitions(t, b.db)[dayName(35)], "the partition with an undelivered event")
			require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM event_outbox WHERE event_type = $1", kindAgedPending))
			require.Zero(t, b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions"))
			require.Zero(t, b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname LIKE 'event_outbox_p%' AND relkind = 'r' AND NOT relispartition"))
		})
	}
}
