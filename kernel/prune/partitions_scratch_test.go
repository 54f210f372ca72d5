package prune_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
)

// partitionOutbox replaces the scratch database's (empty) event_outbox with
// one range-partitioned by created_at into daily partitions from days ago
// to tomorrow, plus a default partition, with the same columns and indexes.
func partitionOutbox(t *testing.T, db *kerneltest.DB, days int) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`DROP TABLE event_outbox;
CREATE TABLE event_outbox (
    id uuid NOT NULL DEFAULT gen_random_uuid(), event_type text NOT NULL, payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), published_at timestamptz, last_error text,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX event_outbox_pending_idx ON event_outbox (created_at) WHERE published_at IS NULL;
CREATE INDEX event_outbox_published_created_idx ON event_outbox (created_at, id) WHERE published_at IS NOT NULL;
CREATE TABLE event_outbox_default PARTITION OF event_outbox DEFAULT;
`)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for d := -days; d <= 1; d++ {
		from := today.AddDate(0, 0, d)
		fmt.Fprintf(&b, "CREATE TABLE event_outbox_p%s PARTITION OF event_outbox FOR VALUES FROM ('%s') TO ('%s');\n",
			from.Format("20060102"), from.Format(time.RFC3339), from.AddDate(0, 0, 1).Format(time.RFC3339))
	}
	db.Exec(t, b.String())
}

// pruneUntilDone runs PruneTable as consecutive cycles would, until a call
// is not capped, and returns the partitions dropped and kept over them.
func pruneUntilDone(ctx context.Context, t *testing.T, db prune.DB, p prune.Policy) (dropped, kept []string) {
	t.Helper()
	for range 100 {
		rep, err := prune.PruneTable(ctx, db, p)
		require.NoError(t, err)
		dropped, kept = append(dropped, rep.Partitions.Dropped...), append(kept, rep.Partitions.Kept...)
		if !rep.Capped {
			return dropped, kept
		}
	}
	t.Fatal("still capped after 100 calls")
	return nil, nil
}

// partitions lists event_outbox's partitions.
func partitions(t *testing.T, db *kerneltest.DB) map[string]bool {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'event_outbox'::regclass`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out[n] = true
	}
	require.NoError(t, rows.Err())
	return out
}

func dayName(daysAgo int) string {
	return "event_outbox_p" + time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -daysAgo).Format("20060102")
}

// insertAt inserts n outbox rows of kind in the middle of the day daysAgo.
func insertAt(t *testing.T, db *kerneltest.DB, kind string, n, daysAgo int, published bool) {
	t.Helper()
	at := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -daysAgo).Add(12 * time.Hour)
	pub := "NULL"
	if published {
		pub = "$2::timestamptz"
	}
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT $1, '{}', $2::timestamptz, `+pub+` FROM generate_series(1, $3::int)`, kind, at, n)
}

// TestRetirePartitions: on a daily-partitioned outbox with a
// 30-day window, an old partition holding only published rows is dropped
// whole; one holding a pending row is kept and only its published rows are
// deleted; the partition straddling the cutoff and the young ones are swept
// by rows or untouched; the default partition is never dropped; the
// partition cap bounds a cycle; the rows dropped count in Deleted.
func TestRetirePartitions(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 45)
	for _, d := range []int{40, 38, 35, 33} {
		insertAt(t, b.db, kindAgedPublished, 20, d, true)
	}
	insertAt(t, b.db, kindAgedPending, 1, 38, false) // evidence: its partition stays
	insertAt(t, b.db, kindFreshPublished, 10, 5, true)
	insertAt(t, b.db, kindFreshPending, 3, 5, false)
	// An aged row in the boundary partition: halfway between the start of
	// the cutoff's UTC day and the cutoff (30 days 1 hour ago lies a day
	// earlier in the first hour after UTC midnight).
	b.db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT $1, '{}', c.day + (c.cutoff - c.day) / 2, now()
		FROM (SELECT now() - interval '30 days' AS cutoff, date_trunc('day', now() - interval '30 days') AS day) AS c`, kindAgedPublished)
	// The boundary partition (30 days ago) holds an aged row and a young one.
	b.db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES ('boundary_young', '{}', now() - interval '29 days 23 hours', now())`)

	p := b.outbox
	require.True(t, p.RetirePartitions)
	p.MaxPartitions = 30
	plan, err := prune.Plan(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, []string{dayName(38)}, plan.PartitionsToKeep, "the dry run names the partition a pending row keeps")
	require.Contains(t, plan.PartitionsToDrop, dayName(40))
	require.NotContains(t, plan.PartitionsToDrop, dayName(30), "never the boundary")
	require.Len(t, partitions(t, b.db), 45+2+1, "a dry run drops nothing")
	// VACUUM has read every partition (as autovacuum will have an old
	// one): the dropped rows are the catalog's count, and exact.
	b.db.Exec(t, `VACUUM event_outbox`)
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	parts := partitions(t, b.db)
	for _, d := range []int{40, 35, 33} {
		require.NotContains(t, parts, dayName(d), "day %d: only published rows: dropped", d)
		require.Contains(t, rep.Partitions.Dropped, dayName(d))
	}
	require.Contains(t, parts, dayName(38), "a pending row keeps its partition")
	require.Equal(t, []string{dayName(38)}, rep.Partitions.Kept)
	require.Contains(t, parts, dayName(30), "the boundary partition is never dropped")
	require.Contains(t, parts, "event_outbox_default")
	require.Equal(t, int64(60), rep.Partitions.DroppedRows)
	require.Equal(t, int64(1), countOutbox(t, b.db, kindAgedPending), "the evidence is kept")
	require.Equal(t, int64(0), countOutbox(t, b.db, kindAgedPublished), "every aged published row is gone: dropped or deleted")
	require.Equal(t, int64(10), countOutbox(t, b.db, kindFreshPublished))
	require.Equal(t, int64(3), countOutbox(t, b.db, kindFreshPending))
	require.Equal(t, int64(1), countOutbox(t, b.db, "boundary_young"))
	require.Equal(t, int64(60+20+1), rep.Deleted, "dropped rows, plus the kept partition's and the boundary's deleted rows")
}

// TestRetirePartitionsNullPredicate: a policy without Keep is checked with
// "(Eligible) IS NOT TRUE", so a row its predicate is NULL for (neither
// eligible nor not) keeps its partition; a partition the catalog has not
// counted (never vacuumed) is counted row by row.
func TestRetirePartitionsNullPredicate(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 45)
	insertAt(t, b.db, kindAgedPublished, 4, 40, true)
	insertAt(t, b.db, kindAgedPending, 1, 40, false) // published_at > created_at is NULL for it
	insertAt(t, b.db, kindAgedPublished, 6, 39, true)
	p := b.outbox
	p.Keep, p.Eligible = "", "published_at >= created_at"
	dropped, kept := pruneUntilDone(ctx, t, b.db.Pool, p)
	require.Contains(t, kept, dayName(40), "a NULL predicate is not eligible: the partition stays")
	for _, k := range kept {
		require.Equal(t, dayName(40), k, "kept by every call that reached it, and nothing else kept")
	}
	require.Contains(t, dropped, dayName(39))
	require.Equal(t, int64(1), countOutbox(t, b.db, kindAgedPending))
	require.Zero(t, countOutbox(t, b.db, kindAgedPublished))
}

// TestRetirePartitionsCap: at most MaxPartitions partitions go per call,
// oldest first (a clock jump must not drop a month at once), and the call
// ends there; the cycle cap counts dropped rows too, and a partition over
// it goes by batches within the cap.
func TestRetirePartitionsCap(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 45)
	insertAt(t, b.db, kindAgedPublished, 20, 44, true)
	insertAt(t, b.db, kindAgedPublished, 20, 43, true)
	p := b.outbox
	p.MaxPartitions = 2
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, []string{dayName(45), dayName(44)}, rep.Partitions.Dropped, "the oldest two")
	require.True(t, rep.Partitions.Capped)
	require.Equal(t, int64(20), rep.Partitions.DroppedRows)
	require.Equal(t, int64(20), rep.Deleted, "the call ends at the partition cap: day 43 is the next call's to drop, not the batch loop's")
	require.Equal(t, int64(20), countOutbox(t, b.db, kindAgedPublished))

	insertAt(t, b.db, kindAgedPublished, 20, 42, true)
	p.MaxPartitions, p.CycleCap = 30, 10
	rep, err = prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Empty(t, rep.Partitions.Dropped, "day 43's 20 rows are over the cycle cap of 10: not dropped")
	require.True(t, rep.Capped)
	require.Equal(t, int64(10), rep.Deleted, "the batch loop takes them within the cap instead")
}

// TestRetirePartitionsReplayRace: a replay holding an old row (made pending
// in an open transaction) is never lost: the retirement waits for it only
// up to its lock timeout and leaves the partitions for the next cycle; once
// the replay commits, that partition holds a pending row and is kept.
func TestRetirePartitionsReplayRace(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 5, 35, true)
	replay, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = replay.Rollback(context.Background()) })
	tag, err := replay.Exec(ctx, `UPDATE event_outbox SET published_at = NULL WHERE event_type = $1 AND ctid = (SELECT min(ctid) FROM event_outbox WHERE event_type = $1)`, kindAgedPublished)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())

	p := b.outbox
	p.PartitionLockTimeout = 100 * time.Millisecond
	p.LockTimeout = 200 * time.Millisecond // as serve sets prune_lock_timeout
	start := time.Now()
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.ErrorIs(t, err, prune.ErrBatchTimeouts, "the row loop then meets the replay's row lock and times out: %+v", rep)
	require.Less(t, time.Since(start), 30*time.Second)
	// The replay's UPDATE through the parent holds every partition (no
	// plan-time pruning): the first old one is busy, and the retirement
	// stops there for this cycle.
	require.Equal(t, []string{dayName(40)}, rep.Partitions.Busy, "the partitions under the replay are left for the next cycle")
	require.Empty(t, rep.Partitions.Dropped)
	require.NoError(t, replay.Commit(ctx))

	_, kept := pruneUntilDone(ctx, t, b.db.Pool, p)
	require.Contains(t, kept, dayName(35), "the replayed row is pending now: its partition is kept")
	require.Equal(t, int64(1), countOutbox(t, b.db, kindAgedPublished), "the replayed row is kept; the other four are deleted")
	var pending bool
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT published_at IS NULL FROM event_outbox WHERE event_type = $1`, kindAgedPublished).Scan(&pending))
	require.True(t, pending)
}

// TestRetirePartitionsWriterWait: a writer inserting into today's partition
// while an old partition is retired waits at most about the lock timeout
// (the retirement's ACCESS EXCLUSIVE request queues writers behind it only
// while it waits).
func TestRetirePartitionsWriterWait(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 100, 35, true)
	// A long transaction holds the parent (a reader), so the retirement's
	// DETACH must wait for it: the worst case for a writer behind it.
	holder, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	_, err = holder.Exec(ctx, `SELECT count(*) FROM event_outbox`)
	require.NoError(t, err)

	p := b.outbox
	p.PartitionLockTimeout = 150 * time.Millisecond
	done := make(chan prune.Report, 1)
	go func() {
		rep, _ := prune.PruneTable(ctx, b.db.Pool, p)
		done <- rep
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO event_outbox (event_type, payload) VALUES ('writer', '{}')`)
	waited := time.Since(start)
	require.NoError(t, err)
	rep := <-done
	t.Logf("writer waited %v behind a retirement with lock timeout %v (busy: %v)", waited, p.PartitionLockTimeout, rep.Partitions.Busy)
	require.Less(t, waited, p.PartitionLockTimeout+time.Second, "a writer waits at most about the lock timeout")
	require.Equal(t, []string{dayName(40)}, rep.Partitions.Busy, "the first busy partition ends the retirement for this cycle")
	require.NoError(t, holder.Rollback(ctx))
	rep, err = prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Contains(t, rep.Partitions.Dropped, dayName(35), "next cycle: dropped")
}

// TestConvertOutboxKeepsEveryRow: the pg_partman conversion of a populated
// event_outbox keeps every row (pending ones included) in daily partitions
// with pg_partman's retention off, and the sweep then retires the old
// partitions that hold only published rows.
func TestConvertOutboxKeepsEveryRow(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	insertOutbox(t, b.db, kindAgedPublished, 50, 40, true)
	insertOutbox(t, b.db, kindAgedPending, 2, 40, false)
	insertOutbox(t, b.db, kindAgedPublished, 30, 36, true)
	insertOutbox(t, b.db, kindFreshPublished, 10, 3, true)
	insertOutbox(t, b.db, kindFreshPending, 5, 1, false)
	before := b.db.Count(t, `SELECT count(*) FROM event_outbox`)
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // a failed conversion must not hold the pool's close
	_, err = tx.Exec(ctx, migrations.PartitionOutboxSQL())
	require.NoError(t, err, "the conversion (pg_partman installed: .ci/run installs postgresql-<version>-partman)")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, before, b.db.Count(t, `SELECT count(*) FROM event_outbox`), "every row is kept")
	require.Equal(t, int64(2), countOutbox(t, b.db, kindAgedPending))
	require.Equal(t, int64(1), b.db.Count(t, `SELECT count(*) FROM partman.part_config WHERE parent_table = 'public.event_outbox' AND retention IS NULL`),
		"pg_partman makes the partitions; its own retention is off")
	yes, err := b.outbox.Partitioned(ctx, b.db.Pool)
	require.NoError(t, err)
	require.True(t, yes)

	rep, err := prune.PruneTable(ctx, b.db.Pool, b.outbox)
	require.NoError(t, err)
	require.Len(t, rep.Partitions.Dropped, prune.DefaultMaxPartitions, "at most a week of partitions a cycle")
	require.True(t, rep.Capped)
	dropped, kept := pruneUntilDone(ctx, t, b.db.Pool, b.outbox)
	dropped = append(dropped, rep.Partitions.Dropped...)
	kept = append(kept, rep.Partitions.Kept...)
	partman := func(daysAgo int) string {
		return "event_outbox_p" + time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -daysAgo).Format("2006_01_02")
	}
	require.Contains(t, dropped, partman(36), "published rows only: retired whole")
	require.Contains(t, kept, partman(40), "the pending rows keep their day")
	require.Equal(t, int64(2), countOutbox(t, b.db, kindAgedPending))
	require.Equal(t, int64(0), countOutbox(t, b.db, kindAgedPublished))
	require.Equal(t, int64(15), countOutbox(t, b.db, kindFreshPublished)+countOutbox(t, b.db, kindFreshPending))

	// Premake: pg_partman's maintenance runs when fewer partitions are made
	// ahead than its premake asks, and not otherwise.
	ahead := func() int64 {
		return b.db.Count(t, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = 'event_outbox'::regclass AND c.relname > $1`, partman(0))
	}
	made := ahead()
	require.GreaterOrEqual(t, made, int64(7), "the conversion made a week ahead")
	b.db.Exec(t, `UPDATE partman.part_config SET premake = 12 WHERE parent_table = 'public.event_outbox'`)
	_, err = prune.PruneTable(ctx, b.db.Pool, b.outbox)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ahead(), int64(12), "premake due: pg_partman made the partitions ahead")
	made = ahead()
	b.db.Exec(t, `UPDATE partman.part_config SET premake = 3 WHERE parent_table = 'public.event_outbox'`)
	_, err = prune.PruneTable(ctx, b.db.Pool, b.outbox)
	require.NoError(t, err)
	require.Equal(t, made, ahead(), "not due: nothing made, nothing dropped ahead")
}

// TestPartitionedTableInspection: the read-only side works through a
// partitioned table's parent: the overrun count (invariants, backlog
// gauge) sees every partition's rows, and the plan check EXPLAINs the
// batch selection without error.
func TestPartitionedTableInspection(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 45)
	insertAt(t, b.db, kindAgedPublished, 7, 40, true)
	insertAt(t, b.db, kindAgedPublished, 5, 33, true)
	insertAt(t, b.db, kindAgedPending, 2, 40, false)
	insertAt(t, b.db, kindFreshPublished, 3, 2, true)
	e, err := prune.CountOlderThan(ctx, b.db.Pool, b.outbox, 32)
	require.NoError(t, err)
	require.Equal(t, int64(12), e.Count, "eligible rows older than 32 days, across partitions; pending rows never")
	require.NotNil(t, e.OldestAge)
	pc, err := prune.ExplainSelection(ctx, b.db.Pool, b.outbox)
	require.NoError(t, err)
	require.Contains(t, pc.Plan, "Append", "one scan per partition")
	require.False(t, pc.SeqScan, "each partition by its sweep index: %s", pc.Plan)
}

// TestRetirePartitionsFinishesStrandedDrops: a partition detached for
// retirement whose drop never ran (the process died between the two
// transactions) is dropped by the next call, after the keep check once
// more, its rows counted at the drop (a row written into it by name since
// counts); a detached table that holds a row that must stay (written into
// it by name) is attached again with its bounds, its rows back in the
// service's sight; one recorded before the lower bound was (migration
// 00008) cannot be, and is reported Failed, left detached.
func TestRetirePartitionsFinishesStrandedDrops(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 6, 36, true)
	insertAt(t, b.db, kindAgedPublished, 4, 35, true)
	// What the detach transaction leaves, twice; then a pending row lands
	// in the second table (written to it by name).
	for _, d := range []int{36, 35} {
		strand(t, b.db, d)
	}
	// A record of before migration 00008 (no lower bound), its table
	// holding a pending row.
	b.db.Exec(t, "ALTER TABLE event_outbox DETACH PARTITION "+dayName(37))
	b.db.Exec(t, `INSERT INTO retention_detached_partitions (table_oid, schema_name, table_name, parent, upper_bound)
		VALUES (to_regclass($1)::oid, 'public', $1, 'event_outbox', $2)`, dayName(37), time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -36))
	b.db.Exec(t, "INSERT INTO "+dayName(37)+" (event_type, payload, created_at) VALUES ($1, '{}', $2)", kindAgedPending,
		time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -37).Add(time.Hour))
	// A published row written by name into the stranded table: counted.
	b.db.Exec(t, "INSERT INTO "+dayName(36)+" (event_type, payload, created_at, published_at) SELECT event_type, payload, created_at, published_at FROM "+dayName(36)+" LIMIT 1")
	// Tables the kernel did not record are never its
	// own, whatever their comment: one in another schema, one detached by
	// somebody else, a young one recorded with a bound after the cutoff.
	b.db.Exec(t, "CREATE SCHEMA other; CREATE TABLE other.archive_copy (LIKE event_outbox); COMMENT ON TABLE other.archive_copy IS 'craig-retention: detached from event_outbox'")
	b.db.Exec(t, "ALTER TABLE event_outbox DETACH PARTITION "+dayName(33))
	b.db.Exec(t, "COMMENT ON TABLE "+dayName(33)+" IS 'craig-retention: detached from event_outbox'")
	b.db.Exec(t, "ALTER TABLE event_outbox DETACH PARTITION "+dayName(5))
	b.db.Exec(t, `INSERT INTO retention_detached_partitions (table_oid, schema_name, table_name, parent, upper_bound)
		VALUES (to_regclass($1)::oid, 'public', $1, 'event_outbox', $2)`, dayName(5), time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -4))
	b.db.Exec(t, "INSERT INTO "+dayName(35)+" (event_type, payload, created_at) SELECT $1, '{}', created_at FROM "+dayName(35)+" LIMIT 1", kindAgedPending)
	// An unmarked standalone table is never the kernel's.
	b.db.Exec(t, "CREATE TABLE event_outbox_p_mine (LIKE event_outbox)")

	rep, err := prune.PruneTable(ctx, b.db.Pool, b.outbox)
	require.NoError(t, err)
	require.Contains(t, rep.Partitions.Dropped, dayName(36), "the stranded drop is finished")
	require.Contains(t, rep.Partitions.Kept, dayName(35), "a row that must stay: attached again")
	require.True(t, partitions(t, b.db)[dayName(35)], "attached again, with its bounds")
	require.Equal(t, int64(1), countOutbox(t, b.db, kindAgedPending), "its pending row is in the service's sight again")
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions WHERE table_name = $1", dayName(35)), "and no longer recorded")
	// Both records without a lower bound: the old one (a row to keep) and
	// the young one (to attach again) are left for an operator, reported.
	require.Len(t, rep.Partitions.Failed, 2)
	require.Equal(t, dayName(37), rep.Partitions.Failed[0].Partition)
	require.Equal(t, dayName(5), rep.Partitions.Failed[1].Partition)
	require.ErrorContains(t, rep.Partitions.Failed[0].Err, "attach it by hand")
	require.False(t, partitions(t, b.db)[dayName(37)], "no lower bound on record: left detached")
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM "+dayName(37)), "and whole")
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", dayName(36)))
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = 'event_outbox_p_mine'"))
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = 'archive_copy'"), "another schema's table: never")
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", dayName(33)), "detached by somebody else: never")
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", dayName(5)), "younger than the cutoff: never")
	require.Equal(t, int64(7), rep.Partitions.DroppedRows, "the stranded table's rows, counted at its drop, count as dropped")
}

// TestRetireOnlyByTheAgeColumn: a table
// range-partitioned by another column than the policy's age column (jobs
// partitioned by created_at, swept by completed_at) never has a partition
// dropped whole: its old partition holds rows completed yesterday. Its
// eligible rows go by batches, and the dry run and the report say why.
func TestRetireOnlyByTheAgeColumn(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	b.db.Exec(t, `CREATE TABLE jobs (id bigint GENERATED ALWAYS AS IDENTITY, status text NOT NULL,
		created_at timestamptz NOT NULL, completed_at timestamptz, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
		CREATE TABLE jobs_old PARTITION OF jobs FOR VALUES FROM ('2000-01-01') TO ('2001-01-01');
		CREATE TABLE jobs_default PARTITION OF jobs DEFAULT;
		INSERT INTO jobs (status, created_at, completed_at) SELECT 'sent', '2000-06-01', now() - interval '40 days' FROM generate_series(1, 50);
		INSERT INTO jobs (status, created_at, completed_at) SELECT 'sent', '2000-06-01', now() - interval '1 day' FROM generate_series(1, 70);`)
	p := prune.Policy{
		Declaration: prune.Declaration{
			Table:     "jobs",
			AgeColumn: "completed_at",
			Eligible:  "status = 'sent'",
			Keep:      "status <> 'sent'",
			DeleteBatch: func(ctx context.Context, db prune.DB, bp prune.BatchParams) (int64, error) {
				tag, err := db.Exec(ctx, `DELETE FROM jobs WHERE (id, created_at) IN (SELECT id, created_at FROM jobs
				WHERE status = 'sent' AND completed_at < now() - make_interval(days => $1::int) LIMIT $2)
				AND completed_at < now() - make_interval(days => $1::int)`, bp.WindowDays, bp.Limit)
				return tag.RowsAffected(), err
			},
		},
		Bounds: prune.Bounds{
			WindowDays:       30,
			RetirePartitions: true,
		},
	}
	plan, err := prune.Plan(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Empty(t, plan.PartitionsToDrop)
	require.Equal(t, prune.NotRetiredKeyMismatch, plan.NotRetired)
	require.Equal(t, int64(50), plan.Count)
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Empty(t, rep.Partitions.Dropped)
	require.Equal(t, "partition_key_mismatch", rep.Partitions.NotRetired)
	require.Equal(t, int64(50), rep.Deleted)
	require.Equal(t, int64(70), b.db.Count(t, "SELECT count(*) FROM jobs"), "every row completed within the window stays")
}

// TestRetireBoundsWhateverTheSession: a partition
// bound is compared as the instant it is, on a session in
// America/New_York with Australian zone abbreviations and SQL, DMY dates
// (where a bound rendered as text and read back moved by hours): the
// partition ending 10 hours after the cutoff is not old, and its young row
// stays.
func TestRetireBoundsWhateverTheSession(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	cutoff := time.Now().UTC().AddDate(0, 0, -30)
	upper := cutoff.Add(10 * time.Hour).Truncate(time.Second)
	b.db.Exec(t, `DROP TABLE event_outbox;
CREATE TABLE event_outbox (
    id uuid NOT NULL DEFAULT gen_random_uuid(), event_type text NOT NULL, payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), published_at timestamptz, last_error text,
    PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE INDEX event_outbox_pending_idx ON event_outbox (created_at) WHERE published_at IS NULL;
CREATE TABLE event_outbox_default PARTITION OF event_outbox DEFAULT;`)
	b.db.Exec(t, fmt.Sprintf(`CREATE TABLE event_outbox_edge PARTITION OF event_outbox FOR VALUES FROM ('%s') TO ('%s')`,
		upper.AddDate(0, 0, -1).Format(time.RFC3339), upper.Format(time.RFC3339)))
	b.db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
		('old', '{}', $1::timestamptz, now()), ('young', '{}', $2::timestamptz, now())`, cutoff.Add(-time.Hour), cutoff.Add(5*time.Hour))
	foreign, err := pgxpool.New(ctx, b.db.URL+"&options="+strings.ReplaceAll(url.QueryEscape("-c TimeZone=America/New_York -c timezone_abbreviations=Australia -c DateStyle=SQL,DMY"), "+", "%20"))
	require.NoError(t, err)
	t.Cleanup(foreign.Close)
	var ds string
	require.NoError(t, foreign.QueryRow(ctx, "SHOW DateStyle").Scan(&ds))
	require.Equal(t, "SQL, DMY", ds, "the session is foreign")
	plan, err := prune.Plan(ctx, foreign, b.outbox)
	require.NoError(t, err)
	require.Empty(t, plan.PartitionsToDrop, "a partition ending after the cutoff is not old")
	rep, err := prune.PruneTable(ctx, foreign, b.outbox)
	require.NoError(t, err)
	require.Empty(t, rep.Partitions.Dropped)
	require.Equal(t, int64(1), rep.Deleted)
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM event_outbox WHERE event_type = 'young'"))
}

// TestRetireCountsRowsTruthfully: a partition whose
// catalog estimate is stale (ANALYZEd at 10 rows, 1,010 now) is not dropped
// by a cycle capped at 100: the cycle removes at most its cap; and the dry
// run agrees with the real run.
func TestRetireCountsRowsTruthfully(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	b.db.Exec(t, "ALTER TABLE "+dayName(36)+" SET (autovacuum_enabled = false)")
	insertAt(t, b.db, kindAgedPublished, 10, 36, true)
	b.db.Exec(t, "ANALYZE "+dayName(36))
	insertAt(t, b.db, kindAgedPublished, 1000, 36, true)
	insertAt(t, b.db, kindAgedPublished, 20, 35, true)
	p := b.outbox
	p.CycleCap, p.BatchSize, p.YieldToWriters = 100, 30, false
	plan, err := prune.Plan(ctx, b.db.Pool, p)
	require.NoError(t, err)
	before := b.db.Count(t, "SELECT count(*) FROM event_outbox")
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	removed := before - b.db.Count(t, "SELECT count(*) FROM event_outbox")
	require.LessOrEqual(t, removed, int64(100), "the cycle cap bounds what a cycle removes")
	require.Equal(t, removed, rep.Deleted, "the report counts what went")
	require.Equal(t, plan.PartitionsToDrop, rep.Partitions.Dropped, "dry run and real run drop the same")
	require.Equal(t, plan.WouldCap, rep.Capped, "dry run and real run cap alike")
	require.Equal(t, int64(plan.Batches), int64(rep.Batches), "dry run and real run take the same batches")
}

// oldWeekPartitioned is a partitioned outbox with 40 days of partitions
// and 5 published rows on each of days 35 to 38: a call under the default
// cap retires a week of old partitions (7) and 20 rows.
func oldWeekPartitioned(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	for d := 35; d <= 38; d++ {
		insertAt(t, b.db, kindAgedPublished, 5, d, true)
	}
	return ctx, b
}

// startWriter commits one-row inserts into the outbox, back to back, from
// another session until stop; it returns once the first has committed.
func startWriter(ctx context.Context, t *testing.T, b *testBundle) (stop func() error) {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	writing, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 0; wctx.Err() == nil; i++ {
			if _, err := b.db.Pool.Exec(wctx, `INSERT INTO event_outbox (event_type, payload) VALUES ('writer', '{}')`); err != nil && wctx.Err() == nil {
				done <- err
				return
			}
			if i == 0 {
				close(writing)
			}
		}
		done <- nil
	}()
	<-writing
	return func() error { cancel(); return <-done }
}

// TestRetirePacesDropsBesideAWriter: while another session commits writes,
// each partition is detached and dropped on its own and the next waits the
// pace; the rows and partitions retired are the same as alone.
func TestRetirePacesDropsBesideAWriter(t *testing.T) {
	t.Parallel()
	ctx, b := oldWeekPartitioned(t)
	p := b.outbox
	p.PartitionPace, p.YieldToWriters = 100*time.Millisecond, true
	stop := startWriter(ctx, t, b)
	start := time.Now()
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	elapsed := time.Since(start)
	require.NoError(t, stop())
	require.NoError(t, err)
	require.Len(t, rep.Partitions.Dropped, 7, "a week of old partitions (the cap)")
	require.Equal(t, int64(20), rep.Partitions.DroppedRows)
	// The first retirement sees the writer; each of the other six waits
	// the pace after the one before it.
	require.GreaterOrEqual(t, elapsed, 5*p.PartitionPace, "retirements were paced")
	for d := 35; d <= 38; d++ {
		require.Zero(t, b.db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", dayName(d)))
	}
}

// TestRetireDropsTheFreeWhenOneIsBusy: of the detached tables dropped
// together, one whose lock is not granted is left for the next call (Busy,
// still recorded) and the others go in the same commit.
func TestRetireDropsTheFreeWhenOneIsBusy(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, sweep.TransportConfig{})
	partitionOutbox(t, b.db, 40)
	insertAt(t, b.db, kindAgedPublished, 6, 36, true)
	insertAt(t, b.db, kindAgedPublished, 4, 35, true)
	for _, d := range []int{36, 35} {
		strand(t, b.db, d)
	}
	reader, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(context.WithoutCancel(ctx)) }()
	_, err = reader.Exec(ctx, "SELECT count(*) FROM "+dayName(36)) // holds ACCESS SHARE until it ends
	require.NoError(t, err)

	p := b.outbox
	p.PartitionLockTimeout = 50 * time.Millisecond
	rep, err := prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, []string{dayName(36)}, rep.Partitions.Busy)
	require.Contains(t, rep.Partitions.Dropped, dayName(35))
	require.Equal(t, int64(4), rep.Partitions.DroppedRows, "only the dropped table's rows")
	require.Equal(t, int64(1), b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions WHERE table_name = $1", dayName(36)), "still recorded")

	require.NoError(t, reader.Rollback(ctx))
	rep, err = prune.PruneTable(ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.Contains(t, rep.Partitions.Dropped, dayName(36), "the next call drops it")
	require.Equal(t, int64(6), rep.Partitions.DroppedRows)
	require.Zero(t, b.db.Count(t, "SELECT count(*) FROM retention_detached_partitions"))
}
