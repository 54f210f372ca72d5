package vacuumwatch_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/vacuumwatch"
	"github.com/craig/retention/migrations"
)

// burnXIDs commits n transactions that each take an xid, so that an xmin
// taken before them is n transactions old.
func burnXIDs(t *testing.T, db *kerneltest.DB, n int) {
	t.Helper()
	for range n {
		_, err := db.Pool.Exec(context.Background(), "SELECT pg_current_xact_id()")
		require.NoError(t, err)
	}
}

// holderFor is the reading's holder of kind named name, if any.
func holderFor(r vacuumwatch.Report, kind, name string) (vacuumwatch.Holder, bool) {
	for _, h := range r.Holders {
		if h.Kind == kind && h.Name == name {
			return h, true
		}
	}
	return vacuumwatch.Holder{}, false
}

// TestOpenSnapshotHoldsTheHorizon: a REPEATABLE READ transaction of another
// session holds its snapshot's xmin; the watchdog names that session and
// its age, and the gauge shows it; once it ends, the holder is gone and the
// gauge is 0 again.
func TestOpenSnapshotHoldsTheHorizon(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL")
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	holder, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	var pid string
	require.NoError(t, holder.QueryRow(ctx, "SELECT pg_backend_pid()::text").Scan(&pid))
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM event_outbox").Scan(&n)) // takes the snapshot
	burnXIDs(t, db, 25)

	m, err := metrics.NewVacuum(prometheus.NewRegistry())
	require.NoError(t, err)
	m.Known(vacuumwatch.Holders())
	rep, err := vacuumwatch.Read(ctx, db.Pool, []string{"event_outbox"})
	require.NoError(t, err)
	h, ok := holderFor(rep, vacuumwatch.HolderBackend, pid)
	require.True(t, ok, "the REPEATABLE READ session %s holds the horizon: %+v", pid, rep.Holders)
	require.GreaterOrEqual(t, h.XminAge, int64(25), "its xmin is older than the 25 transactions after it")
	require.Positive(t, h.HeldSeconds)
	vacuumwatch.Export(m, rep)
	require.GreaterOrEqual(t, testutil.ToFloat64(m.HorizonAge.WithLabelValues(vacuumwatch.HolderBackend)), 25.0)
	require.Positive(t, testutil.ToFloat64(m.HorizonHeld.WithLabelValues(vacuumwatch.HolderBackend)))

	require.NoError(t, tx.Rollback(ctx))
	rep, err = vacuumwatch.Read(ctx, db.Pool, []string{"event_outbox"})
	require.NoError(t, err)
	_, ok = holderFor(rep, vacuumwatch.HolderBackend, pid)
	require.False(t, ok, "released, the session holds nothing")
	vacuumwatch.Export(m, rep)
	if _, other := rep.Oldest()[vacuumwatch.HolderBackend]; !other { // another test's session may hold one meanwhile
		require.Zero(t, testutil.ToFloat64(m.HorizonAge.WithLabelValues(vacuumwatch.HolderBackend)), "released, the alert's series clears")
	}
}

// TestSlotRetainsWAL: a physical replication slot that reserves WAL keeps
// every byte written after it; the watchdog reports it by name and its
// gauge grows; dropped, its series goes.
func TestSlotRetainsWAL(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL")
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	slot := "craig_test_" + hex.EncodeToString(suffix) // slots are the server's, not the database's
	_, err := db.Pool.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", slot)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot)
	})
	_, err = db.Pool.Exec(ctx, `INSERT INTO event_outbox (event_type, payload) SELECT 'test.wal', jsonb_build_object('n', g) FROM generate_series(1, 2000) g`)
	require.NoError(t, err)

	m, err := metrics.NewVacuum(prometheus.NewRegistry())
	require.NoError(t, err)
	rep, err := vacuumwatch.Read(ctx, db.Pool, nil)
	require.NoError(t, err)
	var retained int64 = -1
	for _, s := range rep.Slots {
		if s.Name == slot {
			retained = s.RetainedBytes
			require.Equal(t, "physical", s.Type)
			require.False(t, s.Active, "nothing streams from it")
		}
	}
	require.Positive(t, retained, "the slot keeps the WAL of the insert: %+v", rep.Slots)
	vacuumwatch.Export(m, rep)
	require.Equal(t, float64(retained), testutil.ToFloat64(m.SlotRetainedWAL.WithLabelValues(slot)))

	_, err = db.Pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot)
	require.NoError(t, err)
	rep, err = vacuumwatch.Read(ctx, db.Pool, nil)
	require.NoError(t, err)
	vacuumwatch.Export(m, rep)
	for _, s := range rep.Slots {
		require.NotEqual(t, slot, s.Name)
	}
	require.Equal(t, len(rep.Slots), testutil.CollectAndCount(m.SlotRetainedWAL), "the dropped slot's series is gone (others are the server's other slots)")
}

// TestDeadTuplesOfTheSweptTables: rows a sweep deleted are dead tuples
// until VACUUM reclaims them; the watchdog reports them per table.
func TestDeadTuplesOfTheSweptTables(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL")
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `INSERT INTO event_outbox (event_type, payload) SELECT 'test.dead', '{}'::jsonb FROM generate_series(1, 500)`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DELETE FROM event_outbox`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rep, err := vacuumwatch.Read(ctx, db.Pool, []string{"event_outbox", "event_inbox"})
		return err == nil && rep.DeadTuples["event_outbox"] >= 500 && rep.LiveTuples["event_outbox"] == 0
	}, 10*time.Second, 100*time.Millisecond, "the deleted rows are reported as dead tuples")
}

// scratchName is a server-wide name (a slot's, a prepared transaction's
// gid) no other test uses.
func scratchName() string {
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	return "craig_test_" + hex.EncodeToString(suffix)
}

// TestPreparedTransactionHoldsTheHorizon: a prepared transaction nobody
// commits holds its xmin after its session has gone; the watchdog names
// its gid, the invariant and the findings report it once held past the
// bound, and ROLLBACK PREPARED clears it.
func TestPreparedTransactionHoldsTheHorizon(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL")
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	kerneltest.ServerSetting(t, db, "max_prepared_transactions", func(v string) bool { return v != "0" },
		"max_prepared_transactions > 0: ALTER SYSTEM SET max_prepared_transactions = 16 and a restart, as .ci/run does")
	gid := scratchName()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	for _, stmt := range []string{"BEGIN", "INSERT INTO event_outbox (event_type, payload) VALUES ('test.prepared', '{}')",
		"PREPARE TRANSACTION '" + gid + "'"} { // a gid is a literal; scratchName is hex
		_, err = conn.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, conn.Close(ctx), "the session ends; the prepared transaction stays")
	rolledBack := false
	rollback := func() {
		if !rolledBack {
			_, err := db.Pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'")
			require.NoError(t, err)
			rolledBack = true
		}
	}
	t.Cleanup(rollback) // before the database is dropped: a prepared transaction would block it
	burnXIDs(t, db, 25)

	limits := vacuumwatch.Limits{MaxHeld: time.Millisecond}
	var rep vacuumwatch.Report
	require.Eventually(t, func() bool {
		rep, err = vacuumwatch.Read(ctx, db.Pool, nil)
		require.NoError(t, err)
		h, ok := holderFor(rep, vacuumwatch.HolderPrepared, gid)
		return ok && h.HeldSeconds > limits.MaxHeld.Seconds()
	}, 10*time.Second, 10*time.Millisecond, "the prepared transaction %s holds the horizon past 1ms", gid)
	h, _ := holderFor(rep, vacuumwatch.HolderPrepared, gid)
	require.GreaterOrEqual(t, h.XminAge, int64(25), "its xmin is older than the 25 transactions after it")
	require.Positive(t, vacuumwatch.Invariants(rep, limits)[0].Violations, "vacuum_horizon_held counts it")
	require.True(t, hasFinding(vacuumwatch.Findings(rep, limits), vacuumwatch.FindingHorizonHeld, gid))

	rollback()
	rep, err = vacuumwatch.Read(ctx, db.Pool, nil)
	require.NoError(t, err)
	_, ok := holderFor(rep, vacuumwatch.HolderPrepared, gid)
	require.False(t, ok, "rolled back, it holds nothing")
	require.False(t, hasFinding(vacuumwatch.Findings(rep, limits), vacuumwatch.FindingHorizonHeld, gid))
}

// TestInactiveLogicalSlotHoldsTheHorizon: a logical slot no decoder reads
// holds a catalog_xmin and keeps every WAL byte written after it; the
// watchdog reports the slot as a horizon holder and its retained WAL, the
// slot invariant and the findings report it over the bound, and dropped it
// clears.
//
// Not parallel: creating a logical slot waits until every transaction of
// the server that holds an xid when it starts has ended, so it runs before
// this package's other tests (which hold some); a transaction of another
// package or client can still make it wait, up to logicalSlotWait.
func TestInactiveLogicalSlotHoldsTheHorizon(t *testing.T) { //nolint:paralleltest // see above
	kerneltest.NeedsServer(t, "PostgreSQL")
	ctx, cancel := context.WithTimeout(context.Background(), logicalSlotWait)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	kerneltest.ServerSetting(t, db, "wal_level", func(v string) bool { return v == "logical" },
		"wal_level = logical: ALTER SYSTEM SET wal_level = 'logical' and a restart, as .ci/run does")
	slot := scratchName()
	_, err := db.Pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", slot)
	if err != nil && ctx.Err() != nil {
		t.Fatalf("the logical slot waited %v for the server's running transactions, still running: %s", logicalSlotWait, runningWriters(t, db))
	}
	require.NoError(t, err)
	dropped := false
	drop := func() {
		if !dropped {
			_, err := db.Pool.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot)
			require.NoError(t, err)
			dropped = true
		}
	}
	t.Cleanup(drop) // before the database is dropped: a logical slot would block it
	burnXIDs(t, db, 25)
	_, err = db.Pool.Exec(ctx, `INSERT INTO event_outbox (event_type, payload) SELECT 'test.wal', jsonb_build_object('n', g) FROM generate_series(1, 2000) g`)
	require.NoError(t, err)

	rep, err := vacuumwatch.Read(ctx, db.Pool, nil)
	require.NoError(t, err)
	h, ok := holderFor(rep, vacuumwatch.HolderSlot, slot)
	require.True(t, ok, "the slot's catalog_xmin holds the horizon: %+v", rep.Holders)
	require.GreaterOrEqual(t, h.XminAge, int64(25))
	var found bool
	for _, s := range rep.Slots {
		if s.Name == slot {
			found = true
			require.Equal(t, "logical", s.Type)
			require.False(t, s.Active, "no decoder reads it")
			require.Positive(t, s.RetainedBytes)
		}
	}
	require.True(t, found, "the slot's retained WAL is reported: %+v", rep.Slots)
	limits := vacuumwatch.Limits{MaxSlotWALBytes: 1}
	require.Positive(t, vacuumwatch.Invariants(rep, limits)[1].Violations, "vacuum_slot_wal_retained counts it")
	require.True(t, hasFinding(vacuumwatch.Findings(rep, limits), vacuumwatch.FindingSlotWAL, slot))

	drop()
	rep, err = vacuumwatch.Read(ctx, db.Pool, nil)
	require.NoError(t, err)
	_, ok = holderFor(rep, vacuumwatch.HolderSlot, slot)
	require.False(t, ok, "dropped, it holds nothing")
	require.False(t, hasFinding(vacuumwatch.Findings(rep, limits), vacuumwatch.FindingSlotWAL, slot))
}

// logicalSlotWait bounds the logical slot's creation: it waits for every
// transaction with an xid running when it starts.
const logicalSlotWait = 3 * time.Minute

// runningWriters names the server's transactions holding an xid and its
// prepared transactions (what a logical slot's creation waits for).
func runningWriters(t *testing.T, db *kerneltest.DB) string {
	t.Helper()
	var out string
	err := db.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(w, '; '), 'none') FROM (
		SELECT format('pid %s in %s since %s: %s', pid, datname, xact_start, left(query, 60)) AS w FROM pg_stat_activity WHERE backend_xid IS NOT NULL
		UNION ALL SELECT format('prepared %s in %s since %s', gid, database, prepared) FROM pg_prepared_xacts) x`).Scan(&out)
	if err != nil {
		return err.Error()
	}
	return out
}

func hasFinding(fs []vacuumwatch.Finding, kind, name string) bool {
	for _, f := range fs {
		if f.Kind == kind && f.Name == name {
			return true
		}
	}
	return false
}

// TestIdleWriterHoldsTheHorizon: a READ COMMITTED session that wrote and
// sits idle in its transaction has no snapshot (no backend_xmin) but its
// own transaction id holds VACUUM back all the same; the watchdog names
// it. Committed, it is gone.
func TestIdleWriterHoldsTheHorizon(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL")
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	writer, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	var pid string
	require.NoError(t, writer.QueryRow(ctx, "SELECT pg_backend_pid()::text").Scan(&pid))
	tx, err := writer.Begin(ctx) // READ COMMITTED
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO event_outbox (event_type, payload) VALUES ('test.idle', '{}')")
	require.NoError(t, err)
	burnXIDs(t, db, 25)

	rep, err := vacuumwatch.Read(ctx, db.Pool, nil)
	require.NoError(t, err)
	h, ok := holderFor(rep, vacuumwatch.HolderBackend, pid)
	require.True(t, ok, "the idle writer %s holds the horizon with its xid: %+v", pid, rep.Holders)
	require.GreaterOrEqual(t, h.XminAge, int64(25))
	require.False(t, h.Hidden, "the test's role sees its own sessions' times")

	require.NoError(t, tx.Commit(ctx))
	rep, err = vacuumwatch.Read(ctx, db.Pool, nil)
	require.NoError(t, err)
	_, ok = holderFor(rep, vacuumwatch.HolderBackend, pid)
	require.False(t, ok, "committed, it holds nothing")
}
