package prune_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
)

// Row kinds, stored in event_type so each kind can be counted after a prune.
const (
	kindAgedPublished  = "aged_published"
	kindAgedPending    = "aged_pending"
	kindAgedClaimed    = "aged_claimed"
	kindFreshPublished = "fresh_published"
	kindFreshPending   = "fresh_pending"
)

// testTimeout bounds every database interaction of a test: a prune that
// blocks where it must not fails on it instead of hanging the run.
const testTimeout = 60 * time.Second

type testBundle struct {
	db     *kerneltest.DB
	outbox prune.Policy
	inbox  prune.Policy
}

// setup gives the test a scratch database and the transport policies built
// by sweep.Transport with the given config (zero fields: the defaults of the
// settings package, 30/31 days).
func setup(t *testing.T, cfg sweep.TransportConfig) (context.Context, *testBundle) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)

	if cfg.OutboxWindowDays == 0 && cfg.InboxWindowDays == 0 {
		cfg.OutboxWindowDays, cfg.InboxWindowDays = 30, 31
	}
	g := sweep.Transport(cfg)
	require.Len(t, g.Policies, 3, "outbox, inbox, the outbox's dead letters")
	require.Equal(t, sweep.OutboxTable, g.Policies[0].Table)
	require.Equal(t, sweep.InboxTable, g.Policies[1].Table)

	return ctx, &testBundle{
		db:     kerneltest.NewDB(t, migrations.Transport()),
		outbox: g.Policies[0],
		inbox:  g.Policies[1],
	}
}

// insertOutbox inserts n outbox rows of a kind, created ageDays ago and, if
// published, published at the same instant.
func insertOutbox(t *testing.T, db *kerneltest.DB, kind string, n, ageDays int, published bool) {
	t.Helper()
	got := db.Exec(t, `
		INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT $1, '{}', now() - make_interval(days => $2::int),
		       CASE WHEN $3::bool THEN now() - make_interval(days => $2::int) END
		FROM generate_series(1, $4::int)`, kind, ageDays, published, n)
	require.Equal(t, int64(n), got)
}

// insertInbox inserts n inbox rows received ageDays ago.
func insertInbox(t *testing.T, db *kerneltest.DB, kind string, n, ageDays int) {
	t.Helper()
	got := db.Exec(t, `
		INSERT INTO event_inbox (event_id, event_type, received_at)
		SELECT gen_random_uuid(), $1, now() - make_interval(days => $2::int)
		FROM generate_series(1, $3::int)`, kind, ageDays, n)
	require.Equal(t, int64(n), got)
}

func countOutbox(t *testing.T, db *kerneltest.DB, kind string) int64 {
	t.Helper()
	return db.Count(t, "SELECT count(*) FROM event_outbox WHERE event_type = $1", kind)
}

func countInbox(t *testing.T, db *kerneltest.DB, kind string) int64 {
	t.Helper()
	return db.Count(t, "SELECT count(*) FROM event_inbox WHERE event_type = $1", kind)
}

// waitBlockedBy returns once the session waiterPID is waiting on a lock held
// by blockerPID, as PostgreSQL itself reports it (pg_blocking_pids and
// pg_stat_activity.wait_event_type = 'Lock'). It fails the test if done is
// closed first: the waiter finished without ever blocking.
func waitBlockedBy(ctx context.Context, t *testing.T, pool *pgxpool.Pool, waiterPID, blockerPID int32, done <-chan struct{}) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var blocked bool
		err := pool.QueryRow(ctx, `
			SELECT EXISTS (
				SELECT 1 FROM pg_stat_activity
				WHERE pid = $1 AND wait_event_type = 'Lock' AND $2::int = ANY (pg_blocking_pids($1)))`,
			waiterPID, blockerPID).Scan(&blocked)
		require.NoError(t, err)
		if blocked {
			return
		}
		select {
		case <-done:
			t.Fatalf("session %d finished without blocking on session %d", waiterPID, blockerPID)
		case <-ctx.Done():
			t.Fatalf("session %d never blocked on session %d: %v", waiterPID, blockerPID, ctx.Err())
		case <-tick.C:
		}
	}
}

func TestPruneOutboxPublishedOnly(t *testing.T) {
	t.Parallel()

	ctx, bundle := setup(t, sweep.TransportConfig{})
	db := bundle.db

	insertOutbox(t, db, kindAgedPublished, 3, 31, true)
	insertOutbox(t, db, kindAgedPending, 2, 31, false)
	insertOutbox(t, db, kindAgedClaimed, 1, 31, false)
	insertOutbox(t, db, kindFreshPublished, 2, 1, true)
	insertOutbox(t, db, kindFreshPending, 1, 0, false)

	// A drainer has claimed the aged unpublished row and holds it FOR UPDATE
	// for the whole prune.
	claim, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = claim.Rollback(context.Background()) })
	var claimed int
	require.NoError(t, claim.QueryRow(ctx, `
		WITH c AS (SELECT id FROM event_outbox WHERE event_type = $1 FOR UPDATE SKIP LOCKED)
		SELECT count(*) FROM c`, kindAgedClaimed).Scan(&claimed))
	require.Equal(t, 1, claimed)

	// The prune must not wait for the claim: lock_timeout turns a wait into
	// an error instead of a hang (the claim is held until Cleanup).
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET lock_timeout = '5s'")
	require.NoError(t, err)

	rep, err := prune.PruneTable(ctx, conn, bundle.outbox)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "RESET lock_timeout")
	require.NoError(t, err)

	require.Equal(t, sweep.OutboxTable, rep.Table)
	require.Equal(t, int64(3), rep.Deleted)
	require.Equal(t, 1, rep.Batches)
	require.False(t, rep.Capped)
	require.False(t, rep.Disabled)

	require.Zero(t, countOutbox(t, db, kindAgedPublished), "aged published rows are deleted")
	require.Equal(t, int64(2), countOutbox(t, db, kindAgedPending), "aged PENDING rows are never swept")
	require.Equal(t, int64(1), countOutbox(t, db, kindAgedClaimed), "an aged claimed-but-unpublished row is kept")
	require.Equal(t, int64(2), countOutbox(t, db, kindFreshPublished), "fresh published rows are kept")
	require.Equal(t, int64(1), countOutbox(t, db, kindFreshPending), "fresh pending rows are kept")

	// Still claimed: the prune never touched it.
	require.NoError(t, claim.Commit(ctx))
}

func TestPruneInboxWindowDistinctFromOutbox(t *testing.T) {
	t.Parallel()

	ctx, bundle := setup(t, sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31})
	db := bundle.db

	insertOutbox(t, db, "outbox_31d", 1, 31, true) // past the outbox's 30 d
	insertOutbox(t, db, "outbox_29d", 1, 29, true)
	insertInbox(t, db, "inbox_32d", 1, 32) // past the inbox's 31 d
	insertInbox(t, db, "inbox_30d", 1, 30) // past 30 d, within 31 d

	out, err := prune.PruneTable(ctx, db.Pool, bundle.outbox)
	require.NoError(t, err)
	in, err := prune.PruneTable(ctx, db.Pool, bundle.inbox)
	require.NoError(t, err)

	require.Equal(t, int64(1), out.Deleted)
	require.Equal(t, int64(1), in.Deleted)
	require.Zero(t, countOutbox(t, db, "outbox_31d"), "a published outbox row at 31 d is deleted (30 d window)")
	require.Equal(t, int64(1), countOutbox(t, db, "outbox_29d"))
	require.Zero(t, countInbox(t, db, "inbox_32d"), "an inbox row at 32 d is deleted (31 d window)")
	require.Equal(t, int64(1), countInbox(t, db, "inbox_30d"), "an inbox row at 30 d is kept: the inbox window is not the outbox's")
}

func TestPruneBatching(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		batch       int
		cycleCap    int64
		eligible    int
		wantDeleted int64
		wantBatches int
		wantCapped  bool
	}{
		{name: "PastBatchSize", batch: 100, eligible: 1050, wantDeleted: 1050, wantBatches: 11},
		// A full last batch proves nothing: one more, empty, batch runs.
		{name: "ExactMultipleOfBatch", batch: 100, eligible: 1000, wantDeleted: 1000, wantBatches: 11},
		{name: "SingleShortBatch", batch: 100, eligible: 99, wantDeleted: 99, wantBatches: 1},
		{name: "NothingEligible", batch: 100, eligible: 0, wantDeleted: 0, wantBatches: 1},
		{name: "DefaultBatchSize", batch: 0, eligible: prune.DefaultBatchSize + 1, wantDeleted: prune.DefaultBatchSize + 1, wantBatches: 2},
		{name: "CycleCapStops", batch: 100, cycleCap: 250, eligible: 1000, wantDeleted: 250, wantBatches: 3, wantCapped: true},
		// Capped means "rows MAY remain": reaching the cap with a full batch
		// is reported even when the table happens to be drained, because
		// finding out would take a delete past the cap.
		{name: "CycleCapEqualsEligible", batch: 100, cycleCap: 300, eligible: 300, wantDeleted: 300, wantBatches: 3, wantCapped: true},
		{name: "CycleCapOneAboveEligible", batch: 100, cycleCap: 300, eligible: 299, wantDeleted: 299, wantBatches: 3},
		{name: "CycleCapBelowBatch", batch: 100, cycleCap: 50, eligible: 120, wantDeleted: 50, wantBatches: 1, wantCapped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			ctx, bundle := setup(t, sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, BatchSize: tt.batch, CycleCap: tt.cycleCap})
			db := bundle.db

			insertOutbox(t, db, kindAgedPublished, tt.eligible, 31, true)
			insertOutbox(t, db, kindAgedPending, 7, 31, false)
			insertOutbox(t, db, kindFreshPublished, 5, 1, true)
			before := db.Count(t, "SELECT count(*) FROM event_outbox")

			rep, err := prune.PruneTable(ctx, db.Pool, bundle.outbox)
			require.NoError(t, err)
			require.Equal(t, tt.wantDeleted, rep.Deleted)
			require.Equal(t, tt.wantBatches, rep.Batches)
			require.Equal(t, tt.wantCapped, rep.Capped)

			// Exact: the report is the number of rows that went away.
			require.Equal(t, before-rep.Deleted, db.Count(t, "SELECT count(*) FROM event_outbox"))
			require.Equal(t, int64(tt.eligible)-tt.wantDeleted, countOutbox(t, db, kindAgedPublished))
			require.Equal(t, int64(7), countOutbox(t, db, kindAgedPending))
			require.Equal(t, int64(5), countOutbox(t, db, kindFreshPublished))
		})
	}

	t.Run("InboxPastBatchSize", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t, sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, BatchSize: 100})
		db := bundle.db
		insertInbox(t, db, "aged", 1050, 32)
		insertInbox(t, db, "fresh", 3, 1)

		rep, err := prune.PruneTable(ctx, db.Pool, bundle.inbox)
		require.NoError(t, err)
		require.Equal(t, int64(1050), rep.Deleted)
		require.Equal(t, 11, rep.Batches)
		require.Zero(t, countInbox(t, db, "aged"))
		require.Equal(t, int64(3), countInbox(t, db, "fresh"))
	})

	t.Run("CappedCycleLeavesTheRestForTheNext", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t, sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, BatchSize: 100, CycleCap: 250})
		db := bundle.db
		insertOutbox(t, db, kindAgedPublished, 600, 31, true)

		var got []int64
		for range 3 {
			rep, err := prune.PruneTable(ctx, db.Pool, bundle.outbox)
			require.NoError(t, err)
			got = append(got, rep.Deleted)
		}
		require.Equal(t, []int64{250, 250, 100}, got)
		require.Zero(t, countOutbox(t, db, kindAgedPublished))
	})
}

func TestPruneWindowZeroSkipsThatTableOnly(t *testing.T) {
	t.Parallel()

	ctx, bundle := setup(t, sweep.TransportConfig{OutboxWindowDays: 0, InboxWindowDays: 31})
	db := bundle.db
	require.Zero(t, bundle.outbox.WindowDays)

	insertOutbox(t, db, kindAgedPublished, 4, 400, true)
	insertInbox(t, db, "aged", 2, 32)

	calls := 0
	outbox := bundle.outbox
	inner := outbox.DeleteBatch
	outbox.DeleteBatch = func(ctx context.Context, d prune.DB, p prune.BatchParams) (int64, error) {
		calls++
		return inner(ctx, d, p)
	}

	out, err := prune.PruneTable(ctx, db.Pool, outbox)
	require.NoError(t, err)
	require.True(t, out.Disabled)
	require.Zero(t, out.Deleted)
	require.Zero(t, out.Batches)
	require.Zero(t, calls, "a disabled table runs no statement at all")
	require.Equal(t, int64(4), countOutbox(t, db, kindAgedPublished), "outbox untouched")

	in, err := prune.PruneTable(ctx, db.Pool, bundle.inbox)
	require.NoError(t, err)
	require.False(t, in.Disabled)
	require.Equal(t, int64(2), in.Deleted)
	require.Zero(t, countInbox(t, db, "aged"), "inbox still swept")
}

func TestPruneCancelledBetweenBatches(t *testing.T) {
	t.Parallel()

	ctx, bundle := setup(t, sweep.TransportConfig{BatchSize: 100, OutboxWindowDays: 30, InboxWindowDays: 31})
	db := bundle.db
	insertOutbox(t, db, kindAgedPublished, 500, 31, true)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	calls := 0
	policy := bundle.outbox
	inner := policy.DeleteBatch
	policy.DeleteBatch = func(ctx context.Context, d prune.DB, p prune.BatchParams) (int64, error) {
		calls++
		n, err := inner(ctx, d, p)
		cancel() // the shutdown arrives while the first batch is in flight
		return n, err
	}

	rep, err := prune.PruneTable(cctx, db.Pool, policy)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "prune "+sweep.OutboxTable)
	require.Equal(t, 1, calls, "exactly one batch ran")
	require.Equal(t, 1, rep.Batches)
	require.Equal(t, int64(100), rep.Deleted, "the committed batch is reported")
	require.Equal(t, int64(400), countOutbox(t, db, kindAgedPublished))
}

// TestPruneReplayRace: an admin replay re-nulls published_at on an aged
// published row and holds that change uncommitted while a prune runs. The
// prune's inner SELECT still sees the row as published, so its outer DELETE
// blocks on the replay's row lock; when the replay commits, the DELETE
// re-checks the row and must KEEP it (it is pending again).
func TestPruneReplayRace(t *testing.T) {
	t.Parallel()

	ctx, bundle := setup(t, sweep.TransportConfig{})
	db := bundle.db

	insertOutbox(t, db, "replayed", 1, 31, true)
	insertOutbox(t, db, "other", 2, 31, true)
	var replayedID string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT id::text FROM event_outbox WHERE event_type = 'replayed'").Scan(&replayedID))

	replay, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = replay.Rollback(context.Background()) })
	var replayPID int32
	require.NoError(t, replay.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&replayPID))
	n, err := replay.Exec(ctx, "UPDATE event_outbox SET published_at = NULL WHERE id = $1", replayedID)
	require.NoError(t, err)
	require.Equal(t, int64(1), n.RowsAffected())

	pruneConn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer pruneConn.Release()
	var prunePID int32
	require.NoError(t, pruneConn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&prunePID))

	type result struct {
		rep prune.Report
		err error
	}
	done := make(chan struct{})
	res := make(chan result, 1)
	go func() {
		defer close(done)
		rep, err := prune.PruneTable(ctx, pruneConn, bundle.outbox)
		res <- result{rep, err}
	}()

	// Deterministic interleaving: commit only once PostgreSQL reports the
	// prune waiting on the replay's lock.
	waitBlockedBy(ctx, t, db.Pool, prunePID, replayPID, done)
	require.NoError(t, replay.Commit(ctx))

	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		t.Fatalf("prune did not finish after the replay committed: %v", ctx.Err())
	}
	require.NoError(t, r.err)
	require.Equal(t, int64(2), r.rep.Deleted, "only the untouched aged rows are deleted")

	var pending bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT published_at IS NULL FROM event_outbox WHERE id = $1", replayedID).Scan(&pending),
		"the replayed row must survive the prune")
	require.True(t, pending)
	require.Zero(t, countOutbox(t, db, "other"))

	// The replayed row is pending now: later cycles keep it too.
	rep, err := prune.PruneTable(ctx, db.Pool, bundle.outbox)
	require.NoError(t, err)
	require.Zero(t, rep.Deleted)
	require.Equal(t, int64(1), countOutbox(t, db, "replayed"))
}

// TestPruneRunsOnEveryDBKind checks that PruneTable accepts what the sweep
// and the services hand it: a pool, a pooled connection, a plain connection
// and a transaction.
func TestPruneRunsOnEveryDBKind(t *testing.T) {
	t.Parallel()

	ctx, bundle := setup(t, sweep.TransportConfig{})
	db := bundle.db
	insertOutbox(t, db, kindAgedPublished, 4, 31, true)

	run := func(d prune.DB) int64 {
		t.Helper()
		p := bundle.outbox
		p.BatchSize = 1
		p.CycleCap = 1
		rep, err := prune.PruneTable(ctx, d, p)
		require.NoError(t, err)
		return rep.Deleted
	}

	require.Equal(t, int64(1), run(db.Pool))

	pc, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), run(pc))
	require.Equal(t, int64(1), run(pc.Conn()))
	pc.Release()

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	require.Equal(t, int64(1), run(tx))
	require.NoError(t, tx.Commit(ctx))

	require.Zero(t, countOutbox(t, db, kindAgedPublished), "one row deleted on each kind of DB")
}

// execHook is a prune.DB that runs before once, just before the first Exec
// it is asked for (a keyset batch's DELETE, after its bound query).
type execHook struct {
	prune.DB
	before func()
}

func (h *execHook) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if h.before != nil {
		h.before()
		h.before = nil
	}
	return h.DB.Exec(ctx, sql, args...)
}

// TestShortenedBatchDoesNotEndTheCycle: a replay that
// re-nulls published_at on rows of a batch between its bound and its delete
// makes that batch delete fewer rows than its limit; the cycle goes on (a
// batch that covered a whole batch of keys is not the last), so every
// eligible row is deleted in the one cycle and the replayed rows are kept.
func TestShortenedBatchDoesNotEndTheCycle(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	insertOutbox(t, b.db, kindAgedPublished, 50, 40, true)
	p := b.outbox
	p.BatchSize, p.YieldToWriters = 10, false
	inner := p.DeleteBatch
	calls := 0
	p.DeleteBatch = func(ctx context.Context, db prune.DB, bp prune.BatchParams) (int64, error) {
		calls++
		h := &execHook{DB: db}
		if calls == 1 {
			h.before = func() { // another session, committed before the DELETE runs
				b.db.Exec(t, `UPDATE event_outbox SET published_at = NULL, event_type = 'replayed'
					WHERE id IN (SELECT id FROM event_outbox ORDER BY created_at, id LIMIT 3)`)
			}
		}
		return inner(ctx, h, bp)
	}
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, int64(47), rep.Deleted, "every eligible row in one cycle")
	require.Equal(t, int64(3), countOutbox(t, b.db, "replayed"), "the replayed rows are kept")
	require.Zero(t, countOutbox(t, b.db, kindAgedPublished))
}
