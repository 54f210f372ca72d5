package app_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/kernel/vacuumwatch"
	"github.com/craig/retention/migrations"
)

// replica is one serve process's sweeper with its own registry, wired as
// serve wires it.
type replica struct {
	reg     *prometheus.Registry
	sweeper *sweep.Sweeper
}

func newReplica(t *testing.T, db *kerneltest.DB, cycleCap int64) replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	pm, err := metrics.NewPrune(reg)
	require.NoError(t, err)
	im, err := metrics.NewInvariants(reg)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	groups := sweep.Bounds{BatchSize: 100, CycleCap: cycleCap}.Apply([]sweep.Group{
		sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31}),
	})
	s, err := sweep.New(db.Pool, groups, logger, pm)
	require.NoError(t, err)
	return replica{reg: reg, sweeper: s.WithGroupHook(app.ExportInvariants(im, logger))}
}

// violations returns the exported retention_invariant_violations series.
func (r replica) violations(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "retention_invariant_violations" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestOnlyTheSweepingReplicaExportsInvariants:
// replicas that skipped the sweep (lock_held) still ran the invariant check
// while the leader was mid-drain, and exported its backlog as violations
// for an hour: RetentionInvariantViolated (critical) fired on clean tables.
func TestOnlyTheSweepingReplicaExportsInvariants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'e', '{}', now() - interval '40 days', now() - interval '40 days' FROM generate_series(1, 250)`)
	a, b, c := newReplica(t, db, 1_000_000), newReplica(t, db, 1_000_000), newReplica(t, db, 1_000_000)

	// The leader is mid-drain: it holds the transport lease.
	leader, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = leader.Close(context.Background()) })
	_, err = leader.Exec(ctx, `SELECT pg_advisory_lock($1)`, lease.TransportKey)
	require.NoError(t, err)

	for _, r := range []replica{a, b} {
		rep, err := r.sweeper.RunOnce(ctx)
		require.NoError(t, err)
		require.False(t, rep.LockAcquired)
		require.Empty(t, r.violations(t), "a replica that skipped exports no invariant")
	}
	require.Equal(t, int64(250), db.Count(t, `SELECT count(*) FROM event_outbox`))

	// The leader finishes; replica c runs the next cycle, sweeps, and
	// exports what it sees under the lease: nothing overruns.
	_, err = leader.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lease.TransportKey)
	require.NoError(t, err)
	rep, err := c.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, rep.LockAcquired)
	require.Equal(t, map[string]float64{"outbox_retention_overrun": 0, "inbox_retention_overrun": 0,
		"outbox_future_dated": 0, "inbox_future_dated": 0,
		"outbox_dead_letter_retention_overrun": 0, "outbox_dead_letter_future_dated": 0}, c.violations(t))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM event_outbox`))

	// c ran last cycle; when it skips the next one it drops its series
	// instead of exporting a stale count.
	_, err = leader.Exec(ctx, `SELECT pg_advisory_lock($1)`, lease.TransportKey)
	require.NoError(t, err)
	rep, err = c.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.False(t, rep.LockAcquired)
	require.Empty(t, c.violations(t))
	_, err = leader.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lease.TransportKey)
	require.NoError(t, err)

	// A real overrun is still exported by the runner that ran: a cycle
	// stopped by its cap (100 rows) leaves 150 rows older than window +
	// grace, and its own check under the lease counts them.
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'e', '{}', now() - interval '40 days', now() - interval '40 days' FROM generate_series(1, 250)`)
	d := newReplica(t, db, 100)
	rep, err = d.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, rep.LockAcquired)
	require.True(t, rep.Tables[0].Capped)
	require.Equal(t, float64(150), d.violations(t)["outbox_retention_overrun"])
}

// vacuumReplica is one serve replica's sweeper over groups with the vacuum
// watchdog hooked as serve hooks it, on a database where another session
// holds an old snapshot (one transaction after it).
func vacuumReplica(t *testing.T, groups []sweep.Group) (*kerneltest.DB, *sweep.Sweeper, *metrics.Vacuum) {
	t.Helper()
	ctx := context.Background()
	db := kerneltest.NewDB(t, migrations.Transport())
	reg := prometheus.NewRegistry()
	pm, err := metrics.NewPrune(reg)
	require.NoError(t, err)
	vm, err := metrics.NewVacuum(reg)
	require.NoError(t, err)
	vm.Known(vacuumwatch.Holders())
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := sweep.New(db.Pool, sweep.Bounds{BatchSize: 100, CycleCap: 1000}.Apply(groups), discard, pm)
	require.NoError(t, err)
	s = s.WithGroupHook(app.WatchVacuum(vm, discard, vacuumwatch.Limits{}))

	holder, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM event_outbox").Scan(&n)) // takes the snapshot
	_, err = db.Pool.Exec(ctx, "SELECT pg_current_xact_id()")                          // one transaction after it
	require.NoError(t, err)
	return db, s, vm
}

// lockAsLeader holds a group's advisory lock from another session: another
// replica sweeping it.
func lockAsLeader(t *testing.T, db *kerneltest.DB, key int64) {
	t.Helper()
	ctx := context.Background()
	leader, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = leader.Close(context.Background()) })
	_, err = leader.Exec(ctx, `SELECT pg_advisory_lock($1)`, key)
	require.NoError(t, err)
}

// TestOnlyTheSweepingReplicaExportsTheVacuumReading: the replica that ran
// the group exports what holds VACUUM back; once another replica holds the
// lease it clears its reading instead of keeping a stale hold on the
// alert's max.
func TestOnlyTheSweepingReplicaExportsTheVacuumReading(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s, vm := vacuumReplica(t, []sweep.Group{sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31})})
	rep, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, rep.LockAcquired)
	require.Positive(t, testutil.ToFloat64(vm.HorizonAge.WithLabelValues(vacuumwatch.HolderBackend)), "the sweeping replica reads the session")
	require.Equal(t, 2, testutil.CollectAndCount(vm.DeadTuples), "and the swept tables' dead tuples (outbox, inbox)")

	lockAsLeader(t, db, lease.TransportKey)
	rep, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.False(t, rep.LockAcquired)
	require.Zero(t, testutil.ToFloat64(vm.HorizonAge.WithLabelValues(vacuumwatch.HolderBackend)), "skipped, it clears its reading")
	require.Zero(t, testutil.ToFloat64(vm.HorizonHeld.WithLabelValues(vacuumwatch.HolderBackend)))
	require.Zero(t, testutil.CollectAndCount(vm.DeadTuples))
}

// TestAReplicaThatRanAGroupKeepsItsVacuumReading: a replica that swept one
// group of the cycle and found the next one's lease held keeps its reading
// of the database (the horizon is the database's, not the group's); only
// the skipped group's tables' dead tuples go.
func TestAReplicaThatRanAGroupKeepsItsVacuumReading(t *testing.T) {
	t.Parallel()
	transport := sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31})
	outbox := sweep.Group{Name: "outbox", LockKey: 9_100_001, Policies: transport.Policies[:1]}
	inbox := sweep.Group{Name: "inbox", LockKey: 9_100_002, Policies: transport.Policies[1:2]}
	db, s, vm := vacuumReplica(t, []sweep.Group{outbox, inbox})
	lockAsLeader(t, db, inbox.LockKey) // another replica sweeps the inbox
	for range 2 {                      // two cycles: the second starts with the outbox group seen again
		_, err := s.RunOnce(context.Background())
		require.NoError(t, err)
		require.Positive(t, testutil.ToFloat64(vm.HorizonAge.WithLabelValues(vacuumwatch.HolderBackend)), "the outbox's sweeper keeps its reading of the database")
		require.Equal(t, 1, testutil.CollectAndCount(vm.DeadTuples), "only the swept table's dead tuples")
	}
}
