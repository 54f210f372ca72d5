package prune_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

// Attacks on partition retirement,
// each a guarantee it holds to (they failed before the fixes named).

// sealH adds the seal the kernel's detach transaction leaves.
func sealH(t *testing.T, db *kerneltest.DB, name string) {
	t.Helper()
	db.Exec(t, "ALTER TABLE "+name+" ADD CONSTRAINT craig_retention_detached CHECK (false) NOT VALID")
}

func dayAt(daysAgo int, off time.Duration) time.Time {
	return time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -daysAgo).Add(off)
}

// TestRetireAttackKeptReattachBlockedByDefaultPartition: a stranded (pre-seal)
// detached table holding a pending row must be attached again. While it
// was detached, an ordinary insert through the parent for its range landed
// in the DEFAULT partition. Those rows are moved into the table before its
// ATTACH (which PostgreSQL would refuse otherwise: "updated partition
// constraint for default partition would be violated"), and every row,
// the pending ones first, is back in the service's sight.
func TestRetireAttackKeptReattachBlockedByDefaultPartition(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 5, 36, true)
	strand(t, b.db, 36)
	b.db.Exec(t, "INSERT INTO "+dayName(36)+" (event_type, payload, created_at) VALUES ($1, '{}', $2)", kindAgedPending, dayAt(36, time.Hour))
	// A late write through the parent for the detached range: the default partition takes it.
	b.db.Exec(t, "INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES ('late', '{}', $1, NULL)", dayAt(36, 2*time.Hour))
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM event_outbox_default"))

	var rep prune.Report
	var err error
	for range 3 {
		rep, err = prune.PruneTable(ctx, b.db.Pool, b.outbox)
		require.NoError(t, err)
	}
	t.Logf("report: %+v", rep.Partitions)
	require.Equal(t, int64(1), countOutbox(t, b.db, kindAgedPending), "the pending row must be in the service's sight")
	require.True(t, partitions(t, b.db)[dayName(36)], "attached again")
}

// TestRetireAttackCappedReattachBlockedByDefaultPartition: no tampering at all.
// A sealed stranded table (a drop left undone) holds more rows than the
// call's cap leaves: it is to be attached again for the batch loop. A late
// pending row written through the parent into its range (the default
// partition) is moved into it, and it is attached again: nothing stays
// detached, nothing fails.
func TestRetireAttackCappedReattachBlockedByDefaultPartition(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 50, 36, true)
	strand(t, b.db, 36)
	sealH(t, b.db, dayName(36))
	b.db.Exec(t, "INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES ('late', '{}', $1, NULL)", dayAt(36, 2*time.Hour))
	p := b.outbox
	p.CycleCap = 40
	var rep prune.Report
	var err error
	for range 3 {
		rep, err = prune.PruneTable(ctx, b.db.Pool, p)
		require.NoError(t, err)
	}
	t.Logf("report: %+v", rep.Partitions)
	require.Empty(t, rep.Partitions.Failed)
	require.True(t, partitions(t, b.db)[dayName(36)], "over the cap: attached again, never stranded")
}

// TestRetireAttackWiderWindowStrandsDetached: a table detached under a 30-day
// window whose drop was left undone, the window then widened to 60 days,
// is younger than the new cutoff: it is attached again (Reattached), its
// rows (a pending one among them) back in sight, never left out of it for
// a month.
func TestRetireAttackWiderWindowStrandsDetached(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 5, 36, true)
	strand(t, b.db, 36)
	b.db.Exec(t, "INSERT INTO "+dayName(36)+" (event_type, payload, created_at) VALUES ($1, '{}', $2)", kindAgedPending, dayAt(36, time.Hour))
	p := b.outbox
	p.WindowDays = 60
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	t.Logf("report: %+v", rep.Partitions)
	require.Equal(t, int64(1), countOutbox(t, b.db, kindAgedPending), "the pending row must be in the service's sight")
	require.Equal(t, int64(5), countOutbox(t, b.db, kindAgedPublished), "rows inside the (new) window must be in sight")
	require.Equal(t, []string{dayName(36)}, rep.Partitions.Reattached)
	require.True(t, partitions(t, b.db)[dayName(36)])
}

// TestRetireAttackSubMillisecondLockTimeout: a PartitionLockTimeout of 500µs is
// 1 ms on the server, never lock_timeout '0' (no timeout at all): the
// retirement gives up behind a reader and reports Busy.
func TestRetireAttackSubMillisecondLockTimeout(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 3, 36, true)
	holder, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	_, err = holder.Exec(ctx, "LOCK TABLE "+dayName(36)+" IN ACCESS SHARE MODE")
	require.NoError(t, err)
	p := b.outbox
	p.PartitionLockTimeout = 500 * time.Microsecond
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	rep, err := prune.PruneTable(cctx, b.db.Pool, p)
	require.NoError(t, err, "a lock not granted within the (sub-ms) timeout is Busy, not a 3 s hang")
	require.Contains(t, rep.Partitions.Busy, dayName(36))
}

// TestRetireAttackDeleteByNameBetweenDetachAndDrop: the seal refuses INSERT and
// UPDATE but not DELETE/TRUNCATE: rows deleted by name from a table this
// call detached, before its drop, still count in DroppedRows, by design:
// DroppedRows is what the retirement took from the table (counted under
// the detach's lock), and those rows left the table with it.
func TestRetireAttackDeleteByNameBetweenDetachAndDrop(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 37)
	insertAt(t, b.db, kindAgedPublished, 9, 37, true)
	parent, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = parent.Rollback(context.Background()) })
	_, err = parent.Exec(ctx, "LOCK TABLE ONLY event_outbox IN ACCESS SHARE MODE")
	require.NoError(t, err)
	p := b.outbox
	p.MaxPartitions, p.PartitionLockTimeout = 1, 5*time.Second
	done := make(chan prune.Report, 1)
	go func() {
		rep, err := prune.PruneTable(ctx, b.db.Pool, p)
		assert.NoError(t, err)
		done <- rep
	}()
	waitForLockWaits(ctx, t, b.db, 1) // the DETACH waits for the parent
	deleter, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = deleter.Rollback(context.Background()) })
	deleted := make(chan int64, 1)
	go func() {
		tag, err := deleter.Exec(ctx, "DELETE FROM "+dayName(37)+" WHERE ctid IN (SELECT ctid FROM "+dayName(37)+" LIMIT 4)")
		assert.NoError(t, err)
		deleted <- tag.RowsAffected()
	}()
	waitForLockWaits(ctx, t, b.db, 2)
	require.NoError(t, parent.Rollback(ctx))
	require.Equal(t, int64(4), <-deleted)
	waitForLockWaits(ctx, t, b.db, 1) // the drop waits for the deleter
	require.NoError(t, deleter.Commit(ctx))
	rep := <-done
	require.Equal(t, []string{dayName(37)}, rep.Partitions.Dropped)
	require.Equal(t, int64(9), rep.Partitions.DroppedRows, "DroppedRows is what the retirement took from the table")
}

// TestRetireAttackOddNamesMinvalueForeignDatabase (expected to hold): a
// stranded pre-seal partition with a MINVALUE lower bound, a quoted mixed
// case name in a quoted schema, holding a pending row, is attached back
// with MINVALUE, on a database whose defaults are SERIALIZABLE,
// SQL/DMY dates and a +05:45 time zone.
func TestRetireAttackOddNamesMinvalueForeignDatabase(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	b.db.Exec(t, `CREATE SCHEMA "Odd Sch'ema"`)
	// The oldest daily partitions go; one MINVALUE partition replaces them.
	for d := 40; d >= 38; d-- {
		b.db.Exec(t, "DROP TABLE "+dayName(d))
	}
	b.db.Exec(t, fmt.Sprintf(`CREATE TABLE "Odd Sch'ema"."Old ""P"" Minv" PARTITION OF event_outbox FOR VALUES FROM (MINVALUE) TO ('%s')`, dayAt(37, 0).Format(time.RFC3339)))
	insertAt(t, b.db, kindAgedPublished, 3, 39, true)
	b.db.Exec(t, `ALTER TABLE event_outbox DETACH PARTITION "Odd Sch'ema"."Old ""P"" Minv"`)
	b.db.Exec(t, `INSERT INTO retention_detached_partitions (table_oid, schema_name, table_name, parent, lower_bound, upper_bound, bound_known)
		VALUES (to_regclass('"Odd Sch''ema"."Old ""P"" Minv"')::oid, 'Odd Sch''ema', 'Old "P" Minv', 'event_outbox', NULL, $1, true)`, dayAt(37, 0))
	b.db.Exec(t, `INSERT INTO "Odd Sch'ema"."Old ""P"" Minv" (event_type, payload, created_at) VALUES ($1, '{}', $2)`, kindAgedPending, dayAt(300, 0))
	b.db.Exec(t, `DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = serializable', current_database());
		EXECUTE format('ALTER DATABASE %I SET DateStyle = ''SQL, DMY''', current_database());
		EXECUTE format('ALTER DATABASE %I SET TimeZone = ''Asia/Kathmandu''', current_database()); END$$`)
	pool := poolWithSettings(t, b.db, map[string]string{})
	var iso string
	require.NoError(t, pool.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&iso))
	require.Equal(t, "serializable", iso)
	rep, err := prune.PruneTable(ctx, pool, b.outbox)
	require.NoError(t, err)
	t.Logf("report: %+v", rep.Partitions)
	require.Contains(t, rep.Partitions.Kept, `Old "P" Minv`)
	require.Equal(t, int64(1), countOutbox(t, b.db, kindAgedPending))
	var bound string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE oid = '"Odd Sch''ema"."Old ""P"" Minv"'::regclass`).Scan(&bound))
	require.Contains(t, bound, "MINVALUE")
}

// TestRetireAttackCancelBetweenDetachAndDrop (expected to hold): a call
// cancelled while its drop waits leaves the table detached, sealed and
// recorded; the next call drops it, counting its rows, once.
func TestRetireAttackCancelBetweenDetachAndDrop(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 37)
	insertAt(t, b.db, kindAgedPublished, 7, 37, true)
	reader, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reader.Rollback(context.Background()) })
	parent, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = parent.Rollback(context.Background()) })
	_, err = parent.Exec(ctx, "LOCK TABLE ONLY event_outbox IN ACCESS SHARE MODE")
	require.NoError(t, err)
	p := b.outbox
	p.MaxPartitions, p.PartitionLockTimeout = 1, 20*time.Second
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := prune.PruneTable(cctx, b.db.Pool, p)
		errs <- err
	}()
	waitForLockWaits(ctx, t, b.db, 1)
	locked := make(chan error, 1)
	go func() {
		_, err := reader.Exec(ctx, "LOCK TABLE "+dayName(37)+" IN ACCESS SHARE MODE")
		locked <- err
	}()
	waitForLockWaits(ctx, t, b.db, 2)
	require.NoError(t, parent.Rollback(ctx))
	require.NoError(t, <-locked)
	waitForLockWaits(ctx, t, b.db, 1) // the drop waits for the reader
	cancel()
	require.Error(t, <-errs)
	require.False(t, partitions(t, b.db)[dayName(37)])
	require.NoError(t, reader.Rollback(ctx))
	rep, err := prune.PruneTable(ctx, b.db.Pool, b.outbox)
	require.NoError(t, err)
	require.Contains(t, rep.Partitions.Dropped, dayName(37))
	require.Equal(t, int64(7), rep.Partitions.DroppedRows, "the other old partitions are empty")
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions"))
}

// TestRetireAttackFailedStrandedStarveTheBatchLoop: detached tables that can be
// neither dropped nor attached again (here records of before migration
// 00008 holding a pending row: reported Failed, as documented), more of
// them than MaxPartitions, do not hold the cap: each frees its place, all
// of them are reported, and the batch loop runs.
func TestRetireAttackFailedStrandedStarveTheBatchLoop(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	for _, d := range []int{39, 38, 37} {
		b.db.Exec(t, "ALTER TABLE event_outbox DETACH PARTITION "+dayName(d))
		b.db.Exec(t, `INSERT INTO retention_detached_partitions (table_oid, schema_name, table_name, parent, upper_bound)
			VALUES (to_regclass($1)::oid, 'public', $1, 'event_outbox', $2)`, dayName(d), dayAt(d-1, 0))
		b.db.Exec(t, "INSERT INTO "+dayName(d)+" (event_type, payload, created_at) VALUES ('stuck', '{}', $1)", dayAt(d, time.Hour))
	}
	// A kept partition (a pending row) whose published rows are the batch loop's.
	insertAt(t, b.db, kindAgedPending, 1, 34, false)
	insertAt(t, b.db, kindAgedPublished, 20, 34, true)
	p := b.outbox
	p.MaxPartitions = 2
	var rep prune.Report
	var err error
	for range 8 {
		rep, err = prune.PruneTable(ctx, b.db.Pool, p)
		require.NoError(t, err)
	}
	t.Logf("report: capped=%v batches=%d %+v", rep.Capped, rep.Batches, rep.Partitions)
	require.NotEmpty(t, rep.Partitions.Failed, "the documented Failed path")
	require.Zero(t, countOutbox(t, b.db, kindAgedPublished), "eight cycles: the batch loop must have deleted the kept partition's published rows")
}

// TestRetireAttackBusyReattachIsBusy: a stranded table over the cap is
// to be attached again; a writer's open transaction on the default
// partition makes the ATTACH's lock wait out the lock timeout: a busy
// lock, reported Busy (the table left detached, sealed and recorded for
// the next call), never Failed.
func TestRetireAttackBusyReattachIsBusy(t *testing.T) {
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 50, 36, true)
	strand(t, b.db, 36)
	sealH(t, b.db, dayName(36))
	writer, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Rollback(context.Background()) })
	_, err = writer.Exec(ctx, "INSERT INTO event_outbox (event_type, payload, created_at) VALUES ('w', '{}', '1999-01-01')")
	require.NoError(t, err)
	p := b.outbox
	p.CycleCap = 40
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	t.Logf("report: %+v", rep.Partitions)
	require.Empty(t, rep.Partitions.Failed, "a busy lock is Busy, not Failed")
	require.Contains(t, rep.Partitions.Busy, dayName(36))
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions WHERE table_name = $1", dayName(36)), "still recorded, for the next call")
}
