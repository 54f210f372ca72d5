package sweep_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

// holdTableLock takes ACCESS EXCLUSIVE on table in another session's open
// transaction (a migration, say) until release or the test's end.
func holdTableLock(ctx context.Context, t *testing.T, db *kerneltest.DB, table string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	var once sync.Once
	release = func() {
		once.Do(func() {
			require.NoError(t, tx.Rollback(context.Background()))
			require.NoError(t, conn.Close(context.Background()))
		})
	}
	t.Cleanup(release)
	return release
}

// timeoutTransport is the transport group with batch 100 and per-batch
// timeouts applied the way app.Groups applies the configured bounds.
func timeoutTransport() sweep.Group {
	return sweep.Bounds{StatementTimeout: 5 * time.Second, LockTimeout: 50 * time.Millisecond}.Apply([]sweep.Group{transport(100, 0)})[0]
}

func TestSweeperBatchTimeouts(t *testing.T) {
	t.Parallel()

	t.Run("GivesUpTheTableAfterSixInARow", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 25, 31, true)
		insertInbox(t, db, "aged", 4, 40)
		release := holdTableLock(ctx, t, db, sweep.OutboxTable)

		rep, err := bundle.sweeper(t, timeoutTransport()).RunOnce(ctx)
		require.ErrorIs(t, err, prune.ErrBatchTimeouts)
		out, in := rep.Tables[0], rep.Tables[1]
		require.Equal(t, 6, out.Timeouts)
		require.True(t, out.Reduced)
		require.Zero(t, out.Deleted)
		require.Contains(t, out.Error, "batches keep timing out")
		require.Equal(t, sweep.SkipNotReached, in.Skipped, "the inbox waits for its outbox")

		m := bundle.metrics
		require.InDelta(t, 6, testutil.ToFloat64(m.BatchTimeouts.WithLabelValues(sweep.OutboxTable)), 0)
		require.InDelta(t, 1, testutil.ToFloat64(m.BatchReduced.WithLabelValues(sweep.OutboxTable)), 0)
		require.InDelta(t, 1, testutil.ToFloat64(m.Failures.WithLabelValues(sweep.OutboxTable)), 0)
		_, ok := gauge(t, bundle.reg, lastSuccess, "group", sweep.TransportGroupName)
		require.False(t, ok, "a failed cycle is no success")

		warns := bundle.logs.entries(slog.LevelWarn, "reduced batch size")
		require.Len(t, warns, 1)
		require.Equal(t, sweep.OutboxTable, warns[0].attrs["table"])
		require.Equal(t, int64(6), warns[0].attrs["timeouts"])
		errs := bundle.logs.entries(slog.LevelError, "retention prune failed")
		require.Len(t, errs, 1)
		require.Equal(t, sweep.OutboxTable, errs[0].attrs["table"])

		release()
		require.Equal(t, int64(25), countOutbox(t, db))
		require.Equal(t, int64(4), countInbox(t, db))
	})

	t.Run("RecoversAtTheReducedSize", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 25, 31, true)
		insertInbox(t, db, "aged", 4, 40)
		release := holdTableLock(ctx, t, db, sweep.OutboxTable)

		g := timeoutTransport()
		inner, calls := g.Policies[0].DeleteBatch, 0
		g.Policies[0].DeleteBatch = func(ctx context.Context, d prune.DB, p prune.BatchParams) (int64, error) {
			calls++
			if calls == prune.MaxConsecutiveTimeouts+1 {
				release() // the migration commits as the loop falls back
			}
			return inner(ctx, d, p)
		}

		rep, err := bundle.sweeper(t, g).RunOnce(ctx)
		require.NoError(t, err)
		out := rep.Tables[0]
		require.Equal(t, 3, out.Timeouts)
		require.True(t, out.Reduced)
		require.Equal(t, int64(25), out.Deleted)
		require.Equal(t, 3, out.Batches, "10 + 10 + 5")
		require.Equal(t, int64(4), rep.Tables[1].Deleted)

		raw, err := json.Marshal(out)
		require.NoError(t, err)
		require.Contains(t, string(raw), `"timeouts":3`)
		require.Contains(t, string(raw), `"reduced_batch_size":true`)

		m := bundle.metrics
		require.InDelta(t, 3, testutil.ToFloat64(m.BatchTimeouts.WithLabelValues(sweep.OutboxTable)), 0)
		require.InDelta(t, 1, testutil.ToFloat64(m.BatchReduced.WithLabelValues(sweep.OutboxTable)), 0)
		require.InDelta(t, 0, testutil.ToFloat64(m.BatchTimeouts.WithLabelValues(sweep.InboxTable)), 0)
		require.Zero(t, testutil.CollectAndCount(m.Failures))
		requireGauge(t, bundle.reg, lastSuccess, "group", sweep.TransportGroupName)

		warns := bundle.logs.entries(slog.LevelWarn, "reduced batch size")
		require.Len(t, warns, 1)
		require.Equal(t, int64(3), warns[0].attrs["timeouts"])
		require.Equal(t, int64(prune.MaxConsecutiveTimeouts), warns[0].attrs["consecutive_timeouts"])
		require.Empty(t, bundle.logs.entries(slog.LevelError, ""))
		require.Zero(t, countOutbox(t, db))
	})

	t.Run("NoTimeoutsNoSeries", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		insertOutbox(t, bundle.db, "aged_published", 3, 31, true)
		_, err := bundle.sweeper(t, timeoutTransport()).RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, testutil.CollectAndCount(bundle.metrics.BatchReduced))
		require.InDelta(t, 0, testutil.ToFloat64(bundle.metrics.BatchTimeouts.WithLabelValues(sweep.OutboxTable)), 0)
		for _, w := range bundle.logs.entries(slog.LevelWarn, "") {
			require.False(t, strings.Contains(w.msg, "reduced"), w.msg)
		}
	})
}
