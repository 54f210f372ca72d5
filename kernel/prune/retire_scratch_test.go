package prune_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

// Attacks on partition retirement: each
// names the guarantee it holds the retirement to.

// poolWithSettings is a pool on the scratch database whose sessions start
// with the given settings (a database or role default, as an operator
// might set one).
func poolWithSettings(t *testing.T, db *kerneltest.DB, settings map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	for k, v := range settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// waitForLockWait blocks until a session of the database waits for a lock
// (the retirement queued behind the writer).
func waitForLockWait(ctx context.Context, t *testing.T, db *kerneltest.DB) {
	t.Helper()
	waitForLockWaits(ctx, t, db, 1)
}

// waitForLockWaits blocks until n sessions of the database wait for locks.
func waitForLockWaits(ctx context.Context, t *testing.T, db *kerneltest.DB, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int64
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting >= n
	}, 10*time.Second, 5*time.Millisecond)
}

// TestRetireSealsWhatItDetached: a partition the retirement detached, and
// whose drop a busy lock left for the next call, refuses every write by
// name (its seal) until it is dropped; the next call drops it with the
// rows its detach counted.
func TestRetireSealsWhatItDetached(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 37)
	insertAt(t, b.db, kindAgedPublished, 9, 37, true)
	// The parent alone held: the retirement's DETACH waits, its partition
	// locked.
	parent, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = parent.Rollback(context.Background()) })
	_, err = parent.Exec(ctx, "LOCK TABLE ONLY event_outbox IN ACCESS SHARE MODE")
	require.NoError(t, err)
	p := b.outbox
	p.MaxPartitions, p.PartitionLockTimeout = 1, 3*time.Second
	done := make(chan prune.Report, 1)
	go func() {
		rep, err := prune.PruneTable(ctx, b.db.Pool, p)
		assert.NoError(t, err)
		done <- rep
	}()
	waitForLockWaits(ctx, t, b.db, 1)
	// A reader queues for the partition behind the detach: it holds it
	// once the detach commits, and the drop's lock is not granted.
	reader, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reader.Rollback(context.Background()) })
	locked := make(chan error, 1)
	go func() {
		_, err := reader.Exec(ctx, "LOCK TABLE "+dayName(37)+" IN ACCESS SHARE MODE")
		locked <- err
	}()
	waitForLockWaits(ctx, t, b.db, 2)
	require.NoError(t, parent.Rollback(ctx))
	require.NoError(t, <-locked)
	rep := <-done
	require.Equal(t, []string{dayName(37)}, rep.Partitions.Busy, "detached, its drop busy")
	require.False(t, partitions(t, b.db)[dayName(37)])

	_, err = b.db.Pool.Exec(ctx, "INSERT INTO "+dayName(37)+" (event_type, payload, created_at) VALUES ($1, '{}', $2)",
		kindAgedPending, time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -37).Add(time.Hour))
	require.ErrorContains(t, err, "craig_retention_detached", "a write by name into a detached table is refused")
	_, err = b.db.Pool.Exec(ctx, "UPDATE "+dayName(37)+" SET published_at = NULL")
	require.ErrorContains(t, err, "craig_retention_detached")

	require.NoError(t, reader.Rollback(ctx))
	rep, err = prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, []string{dayName(37)}, rep.Partitions.Dropped)
	require.Equal(t, int64(9), rep.Partitions.DroppedRows)
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", dayName(37)))
}

// TestRetireSeesRowsCommittedWhileItWaited: a pending row committed into
// an old partition (or, by name, into a detached one whose drop a crash
// left undone) while the retirement waits for its lock keeps the table,
// whatever default_transaction_isolation the sessions start with (a
// REPEATABLE READ snapshot taken before the lock was granted would not see
// the row, and the table would go with it).
func TestRetireSeesRowsCommittedWhileItWaited(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{"read committed", "repeatable read", "serializable"} {
		for _, stranded := range []bool{false, true} {
			name := iso + "/attached"
			if stranded {
				name = iso + "/stranded"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				retireBesideAWriter(t, iso, stranded)
			})
		}
	}
}

func retireBesideAWriter(t *testing.T, iso string, stranded bool) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 5, 36, true)
	target := "event_outbox"
	if stranded {
		strand(t, b.db, 36)
		target = dayName(36)
	}
	pool := poolWithSettings(t, b.db, map[string]string{"default_transaction_isolation": iso})

	writer, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Rollback(context.Background()) })
	_, err = writer.Exec(ctx, `INSERT INTO `+target+` (event_type, payload, created_at) VALUES ($1, '{}', $2)`,
		kindAgedPending, time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -36).Add(time.Hour))
	require.NoError(t, err)

	p := b.outbox
	p.PartitionLockTimeout = 20 * time.Second
	done := make(chan prune.Report, 1)
	errs := make(chan error, 1)
	go func() {
		rep, err := prune.PruneTable(ctx, pool, p)
		done <- rep
		errs <- err
	}()
	waitForLockWait(ctx, t, b.db)
	require.NoError(t, writer.Commit(ctx))
	rep := <-done
	require.NoError(t, <-errs)
	require.Contains(t, rep.Partitions.Kept, dayName(36), "the row committed while the retirement waited keeps its table")
	require.NotContains(t, rep.Partitions.Dropped, dayName(36))
	require.True(t, partitions(t, b.db)[dayName(36)], "attached (again)")
	require.Equal(t, int64(1), countOutbox(t, b.db, kindAgedPending))
}

// TestRetireRefusesARepeatableReadCaller: handed a caller's transaction
// that is not READ COMMITTED, the retirement refuses and changes nothing.
func TestRetireRefusesARepeatableReadCaller(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 5, 36, true)
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	_, err = prune.PruneTable(ctx, tx, b.outbox)
	require.ErrorIs(t, err, prune.ErrNotReadCommitted)
	require.NoError(t, tx.Rollback(ctx))
	require.True(t, partitions(t, b.db)[dayName(36)], "nothing retired")
	require.Equal(t, int64(5), countOutbox(t, b.db, kindAgedPublished))
}

// TestRetireAttachesAgainWhatItCannotDrop: a stranded table whose DROP
// fails for another reason than a lock (a view depends on it) is reported
// Failed and attached again, its rows going by the batch loop; the other
// stranded tables are still dropped, and the call goes on. One holding
// more rows than the call's cap leaves is attached again too (the batch
// loop takes them within the cap), never dropped over the cap.
func TestRetireAttachesAgainWhatItCannotDrop(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	for _, d := range []int{38, 37, 36} {
		insertAt(t, b.db, kindAgedPublished, 4, d, true)
	}
	insertAt(t, b.db, kindAgedPublished, 50, 35, true)
	for _, d := range []int{38, 37, 36, 35} {
		strand(t, b.db, d)
	}
	b.db.Exec(t, "CREATE VIEW someone_elses_view AS SELECT * FROM "+dayName(37))

	p := b.outbox
	p.CycleCap = 40
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Subset(t, rep.Partitions.Dropped, []string{dayName(38), dayName(36)}, "the others go")
	require.NotContains(t, rep.Partitions.Dropped, dayName(37))
	require.NotContains(t, rep.Partitions.Dropped, dayName(35))
	require.Equal(t, int64(8), rep.Partitions.DroppedRows)
	require.Len(t, rep.Partitions.Failed, 1)
	require.Equal(t, dayName(37), rep.Partitions.Failed[0].Partition)
	require.ErrorContains(t, rep.Partitions.Failed[0].Err, "other objects depend on it")
	parts := partitions(t, b.db)
	require.True(t, parts[dayName(37)], "a DROP refused: attached again")
	require.True(t, parts[dayName(35)], "over the cap: attached again")
	require.LessOrEqual(t, rep.Deleted, p.CycleCap, "never over the cap")
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions"), "nothing left recorded")
	// The batch loop went on and takes the rest within the cap, cycle by
	// cycle; nothing was lost out of the service's sight.
	for range 5 {
		_, err = prune.PruneTable(ctx, b.db.Pool, p)
		require.NoError(t, err)
	}
	require.Zero(t, countOutbox(t, b.db, kindAgedPublished))
}

// strand leaves an old partition as a retirement's detach does when its
// drop never ran: detached, marked and recorded with its bounds.
func strand(t *testing.T, db *kerneltest.DB, daysAgo int) {
	t.Helper()
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -daysAgo)
	db.Exec(t, "ALTER TABLE event_outbox DETACH PARTITION "+dayName(daysAgo))
	db.Exec(t, "COMMENT ON TABLE "+dayName(daysAgo)+" IS 'craig-retention: detached from event_outbox'")
	db.Exec(t, `INSERT INTO retention_detached_partitions (table_oid, schema_name, table_name, parent, lower_bound, upper_bound, bound_known)
		VALUES (to_regclass($1)::oid, 'public', $1, 'event_outbox', $2, $3, true)`, dayName(daysAgo), day, day.AddDate(0, 0, 1))
}

// TestRetireStrandedWithinTheCaps: stranded tables count toward the
// partition cap like any other retirement.
func TestRetireStrandedWithinTheCaps(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 45)
	for d := 44; d >= 35; d-- {
		insertAt(t, b.db, kindAgedPublished, 2, d, true)
		strand(t, b.db, d)
	}
	p := b.outbox
	p.MaxPartitions = 2
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, []string{dayName(44), dayName(43)}, rep.Partitions.Dropped, "two partitions a call, stranded or not")
	require.True(t, rep.Capped)
	require.Equal(t, int64(8), b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions"))
	for range 4 {
		rep, err = prune.PruneTable(ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.Len(t, rep.Partitions.Dropped, 2)
	}
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions"), "every stranded table dropped, two a call")
}

// TestRetireRacingCalls: two calls retiring the same table at once (two
// replicas whose leases overlapped) both succeed (a partition the other
// took first is gone, one it holds is busy), no partition is reported
// retired twice, and the calls that follow finish the work.
func TestRetireRacingCalls(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 45)
	for d := 44; d >= 31; d-- {
		insertAt(t, b.db, kindAgedPublished, 3, d, true)
	}
	p := b.outbox
	p.MaxPartitions = 20
	var wg sync.WaitGroup
	reps := make([]prune.Report, 2)
	errs := make([]error, 2)
	for i := range reps {
		wg.Go(func() { reps[i], errs[i] = prune.PruneTable(ctx, b.db.Pool, p) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	seen := map[string]int{}
	for _, r := range reps {
		for _, n := range r.Partitions.Dropped {
			seen[n]++
		}
	}
	dropped, _ := pruneUntilDone(ctx, t, b.db.Pool, p)
	for _, n := range dropped {
		seen[n]++
	}
	parts := partitions(t, b.db)
	for d := 44; d >= 31; d-- {
		require.LessOrEqual(t, seen[dayName(d)], 1, "%s retired at most once", dayName(d))
		require.False(t, parts[dayName(d)], "%s retired", dayName(d))
	}
	require.Zero(t, countOutbox(t, b.db, kindAgedPublished))
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions"))
}
