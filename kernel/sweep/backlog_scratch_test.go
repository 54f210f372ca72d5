package sweep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

const (
	backlogGauge = "retention_oldest_eligible_age_seconds"
	lastSuccess  = "retention_sweep_last_success_timestamp_seconds"
)

// gauge returns the value of the series of a gauge family with the given
// label, and whether the registry exposes that series at all (ToFloat64 on a
// vec would create a missing series and read 0).
func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func requireGauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	v, ok := gauge(t, reg, name, label, value)
	require.True(t, ok, "%s{%s=%q} is exported", name, label, value)
	return v
}

// insertSpreadOutbox inserts n published outbox rows created 31 d + g hours
// ago for g = 1..n: every row is eligible at the 30-day window, each with a
// different age.
func insertSpreadOutbox(t *testing.T, db *kerneltest.DB, n int) {
	t.Helper()
	db.Exec(t, `
		INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'spread', '{}', now() - interval '31 days' - g * interval '1 hour', now() - interval '31 days'
		FROM generate_series(1, $1::int) AS g`, n)
}

// oldestEligibleOutboxAge is the age, by the database clock, of the oldest
// outbox row the sweep may delete now.
func oldestEligibleOutboxAge(t *testing.T, db *kerneltest.DB) float64 {
	t.Helper()
	var secs float64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT EXTRACT(EPOCH FROM now() - min(created_at))::float8 FROM event_outbox
		WHERE published_at IS NOT NULL AND created_at < now() - interval '30 days'`).Scan(&secs))
	return secs
}

func TestBacklogGauge(t *testing.T) {
	t.Parallel()

	t.Run("ZeroAfterACycleThatClearsEverything", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		db := bundle.db
		insertSpreadOutbox(t, db, 5)
		insertOutbox(t, db, "aged_pending", 3, 400, false) // never eligible: not backlog
		insertInbox(t, db, "aged", 4, 40)

		rep, err := bundle.sweeper(t, transport(2, 0)).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(9), rep.Deleted())
		require.Zero(t, requireGauge(t, bundle.reg, backlogGauge, "table", sweep.OutboxTable))
		require.Zero(t, requireGauge(t, bundle.reg, backlogGauge, "table", sweep.InboxTable))
	})

	t.Run("OldestRemainingAfterACappedCycle", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		db := bundle.db
		insertSpreadOutbox(t, db, 50)
		s := bundle.sweeper(t, transport(10, 20))

		// 50 eligible rows, 20 a cycle: two capped cycles, then one that
		// clears the rest. The gauge follows every cycle.
		for cycle, want := range []struct {
			deleted int64
			capped  bool
			remain  int64
		}{{20, true, 30}, {20, true, 10}, {10, false, 0}} {
			rep, err := s.RunOnce(ctx)
			require.NoError(t, err)
			out := rep.Tables[0]
			require.Equal(t, want.deleted, out.Deleted, "cycle %d", cycle+1)
			require.Equal(t, want.capped, out.Capped, "cycle %d", cycle+1)
			require.Equal(t, want.remain, countOutbox(t, db))

			got := requireGauge(t, bundle.reg, backlogGauge, "table", sweep.OutboxTable)
			if want.remain == 0 {
				require.Zero(t, got, "cycle %d: nothing left is age 0", cycle+1)
				continue
			}
			require.Greater(t, got, (31 * 24 * time.Hour).Seconds(), "cycle %d: the remaining rows are all past 31 days", cycle+1)
			require.InDelta(t, oldestEligibleOutboxAge(t, db), got, 5, "cycle %d: the oldest remaining eligible row", cycle+1)
		}
	})

	t.Run("DisabledTableIsZero", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		db := bundle.db
		insertSpreadOutbox(t, db, 5) // would be eligible if the sweep were on
		insertInbox(t, db, "aged", 1, 40)

		g := sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 0, InboxWindowDays: 31})
		_, err := bundle.sweeper(t, g).RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, requireGauge(t, bundle.reg, backlogGauge, "table", sweep.OutboxTable), "a disabled table has no backlog")
		require.Equal(t, int64(5), countOutbox(t, db))
		require.Zero(t, requireGauge(t, bundle.reg, backlogGauge, "table", sweep.InboxTable))

		// All disabled: no lease is taken, the gauges still read 0.
		_, bundle2 := setup(t)
		_, err = bundle2.sweeper(t, sweep.Transport(sweep.TransportConfig{})).RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, requireGauge(t, bundle2.reg, backlogGauge, "table", sweep.OutboxTable))
		require.Zero(t, requireGauge(t, bundle2.reg, backlogGauge, "table", sweep.InboxTable))
	})

	t.Run("FailedPruneLeavesTheGaugeAlone", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		insertSpreadOutbox(t, bundle.db, 5)
		g := transport(0, 0)
		g.Policies[0].DeleteBatch = func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
			return 0, errors.New("boom")
		}
		_, err := bundle.sweeper(t, g).RunOnce(ctx)
		require.Error(t, err)
		_, ok := gauge(t, bundle.reg, backlogGauge, "table", sweep.OutboxTable)
		require.False(t, ok, "no cycle measured the backlog; the failure alert covers it")
	})
}

func TestLastSuccessTimestamp(t *testing.T) {
	t.Parallel()

	t.Run("SetAfterASuccessfulCycle", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		insertOutbox(t, bundle.db, "aged_published", 3, 31, true)

		_, ok := gauge(t, bundle.reg, lastSuccess, "group", sweep.TransportGroupName)
		require.False(t, ok, "no cycle yet")
		before := float64(time.Now().UnixNano()) / 1e9
		_, err := bundle.sweeper(t, transport(0, 0)).RunOnce(ctx)
		require.NoError(t, err)
		after := float64(time.Now().UnixNano()) / 1e9

		got := requireGauge(t, bundle.reg, lastSuccess, "group", sweep.TransportGroupName)
		require.GreaterOrEqual(t, got, before)
		require.LessOrEqual(t, got, after)
	})

	t.Run("NotSetByAFailedOrSkippedGroup", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		holdLock(ctx, t, bundle.db, lease.TransportKey)
		calls := &callLog{}
		groups := []sweep.Group{
			transport(0, 0), // lease held elsewhere: skipped
			{Name: "broken", LockKey: 21, Policies: []prune.Policy{fakePolicy("broken_a", calls, func() (int64, error) { return 0, errors.New("boom") })}},
			{Name: "fine", LockKey: 22, Policies: []prune.Policy{fakePolicy("fine_a", calls, func() (int64, error) { return 0, nil })}},
		}
		_, err := bundle.sweeper(t, groups...).RunOnce(ctx)
		require.Error(t, err)

		for _, group := range []string{sweep.TransportGroupName, "broken"} {
			_, ok := gauge(t, bundle.reg, lastSuccess, "group", group)
			require.False(t, ok, group)
		}
		requireGauge(t, bundle.reg, lastSuccess, "group", "fine")
	})
}

// TestDryRunReport pins the kernel side of `sweep --once --dry-run`: what a
// cycle would do, without deleting, recording metrics or holding a lease.
func TestDryRunReport(t *testing.T) {
	t.Parallel()

	t.Run("CappedPlanMatchesTheRealCycle", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		db := bundle.db
		insertSpreadOutbox(t, db, 50)
		insertInbox(t, db, "aged", 7, 40)
		s := bundle.sweeper(t, transport(10, 20))

		dry, err := s.DryRun(ctx)
		require.NoError(t, err)
		require.True(t, dry.DryRun)
		require.True(t, dry.LockAcquired)
		require.Equal(t, int64(50), countOutbox(t, db), "a dry run deletes nothing")
		require.Equal(t, int64(7), countInbox(t, db))
		families, err := bundle.reg.Gather()
		require.NoError(t, err)
		require.Empty(t, families, "a dry run records no metrics")

		ran, err := s.RunOnce(ctx)
		require.NoError(t, err)
		require.Len(t, dry.Tables, 2)
		for i, d := range dry.Tables {
			r := ran.Tables[i]
			require.Equal(t, r.Table, d.Table)
			require.NotNil(t, d.DryRunTable)
			require.Zero(t, d.Deleted)
			require.Equal(t, r.Batches, d.Batches, "%s: batches", d.Table)
			require.Equal(t, r.Capped, d.Capped, "%s: capped", d.Table)
		}
		require.Equal(t, int64(50), dry.Tables[0].Eligible)
		require.True(t, dry.Tables[0].Capped)
		require.Equal(t, 2, dry.Tables[0].Batches)
		require.Equal(t, int64(20), ran.Tables[0].Deleted, "the cap, not the 50 eligible")
		require.Equal(t, int64(7), dry.Tables[1].Eligible)
		require.Equal(t, ran.Tables[1].Deleted, dry.Tables[1].Eligible)
		require.InDelta(t, (40 * 24 * time.Hour).Seconds(), *dry.Tables[1].OldestEligibleAgeSeconds, 60)
	})

	t.Run("LeaseHeldElsewhere", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		insertOutbox(t, bundle.db, "aged_published", 3, 31, true)
		holdLock(ctx, t, bundle.db, lease.TransportKey)

		dry, err := bundle.sweeper(t, transport(0, 0)).DryRun(ctx)
		require.NoError(t, err, "a dry run reads without the lease")
		require.False(t, dry.LockAcquired, "it says another runner holds it")
		require.Equal(t, int64(3), dry.Tables[0].Eligible)
		require.Empty(t, dry.Tables[0].Skipped)
		require.Equal(t, int64(3), countOutbox(t, bundle.db))
	})

	t.Run("NothingEligible", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		insertOutbox(t, bundle.db, "fresh", 3, 1, true)
		dry, err := bundle.sweeper(t, transport(0, 0)).DryRun(ctx)
		require.NoError(t, err)
		for _, tr := range dry.Tables {
			require.Zero(t, tr.Eligible, tr.Table)
			require.Nil(t, tr.OldestEligibleAgeSeconds, tr.Table)
			require.Equal(t, 1, tr.Batches, "%s: a real run still takes one (empty) batch", tr.Table)
		}
	})
}
