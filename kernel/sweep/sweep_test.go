package sweep_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

func noopBatch(context.Context, prune.DB, prune.BatchParams) (int64, error) { return 0, nil }

func policy(table string) prune.Policy {
	return prune.Policy{Declaration: prune.Declaration{Table: table, DeleteBatch: noopBatch}, Bounds: prune.Bounds{WindowDays: 30}}
}

func TestTransportGroup(t *testing.T) {
	t.Parallel()

	g := sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, BatchSize: 100, CycleCap: 250})

	require.Equal(t, sweep.TransportGroupName, g.Name)
	require.Equal(t, "transport", g.Name)
	require.Equal(t, lease.TransportKey, g.LockKey)
	require.Len(t, g.Policies, 3)

	// The dead letters: the outbox table under their own label, off
	// (kept forever) at window 0, never retiring partitions.
	dead := g.Policies[2]
	require.Equal(t, sweep.OutboxTable, dead.Table)
	require.Equal(t, sweep.OutboxDeadLetters, dead.Label())
	require.Equal(t, "dead_lettered_at", dead.AgeColumn)
	require.Zero(t, dead.WindowDays)
	require.False(t, dead.RetirePartitions)

	// Outbox THEN inbox: if a cycle dies between the two, the inbox dedup
	// records outlive the outbox rows that could still be replayed.
	out, in := g.Policies[0], g.Policies[1]
	require.Equal(t, sweep.OutboxTable, out.Table)
	require.Equal(t, "event_outbox", out.Table)
	require.Equal(t, sweep.InboxTable, in.Table)
	require.Equal(t, "event_inbox", in.Table)

	require.Equal(t, 30, out.WindowDays)
	require.Equal(t, 31, in.WindowDays)
	for _, p := range g.Policies {
		require.Equal(t, 100, p.BatchSize)
		require.Equal(t, int64(250), p.CycleCap)
		require.NotNil(t, p.DeleteBatch)
		require.NoError(t, p.Validate())
	}
}

func TestNew(t *testing.T) {
	t.Parallel()

	// pgxpool.New does not connect; New never touches the database.
	pool, err := pgsession.NewPool(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	logger := slog.New(slog.DiscardHandler)
	m, err := metrics.NewPrune(prometheus.NewRegistry())
	require.NoError(t, err)

	transport := sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31})
	local := sweep.Group{Name: "local", LockKey: 7, Policies: []prune.Policy{policy("exchange_send_jobs")}}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()

		groups := []sweep.Group{transport, local}
		s, err := sweep.New(pool, groups, logger, m)
		require.NoError(t, err)
		require.Equal(t, groups, s.Groups())
	})

	t.Run("NoGroups", func(t *testing.T) {
		t.Parallel()

		s, err := sweep.New(pool, nil, logger, m)
		require.NoError(t, err)
		require.Empty(t, s.Groups())
	})

	tests := []struct {
		name    string
		pool    *pgxpool.Pool
		logger  *slog.Logger
		metrics *metrics.Prune
		groups  []sweep.Group
		wantErr string
	}{
		{name: "NilPool", logger: logger, metrics: m, groups: []sweep.Group{transport}, wantErr: "pool, logger and metrics are required"},
		{name: "NilLogger", pool: pool, metrics: m, groups: []sweep.Group{transport}, wantErr: "pool, logger and metrics are required"},
		{name: "NilMetrics", pool: pool, logger: logger, groups: []sweep.Group{transport}, wantErr: "pool, logger and metrics are required"},
		{
			name: "EmptyGroupName", pool: pool, logger: logger, metrics: m,
			groups:  []sweep.Group{{LockKey: 1, Policies: []prune.Policy{policy("a")}}},
			wantErr: "needs a name and at least one policy",
		},
		{
			name: "GroupWithoutPolicies", pool: pool, logger: logger, metrics: m,
			groups:  []sweep.Group{{Name: "empty", LockKey: 1}},
			wantErr: `group "empty" needs a name and at least one policy`,
		},
		{
			name: "DuplicateLockKey", pool: pool, logger: logger, metrics: m,
			groups: []sweep.Group{
				transport,
				{Name: "local", LockKey: lease.TransportKey, Policies: []prune.Policy{policy("exchange_send_jobs")}},
			},
			wantErr: `groups "transport" and "local" share lock key`,
		},
		{
			name: "DuplicateTableAcrossGroups", pool: pool, logger: logger, metrics: m,
			groups: []sweep.Group{
				transport,
				{Name: "local", LockKey: 7, Policies: []prune.Policy{policy(sweep.InboxTable)}},
			},
			wantErr: `table "event_inbox" registered twice`,
		},
		{
			name: "DuplicateTableWithinGroup", pool: pool, logger: logger, metrics: m,
			groups:  []sweep.Group{{Name: "local", LockKey: 7, Policies: []prune.Policy{policy("a"), policy("a")}}},
			wantErr: `table "a" registered twice`,
		},
		{
			name: "InvalidPolicy", pool: pool, logger: logger, metrics: m,
			groups:  []sweep.Group{sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 3651, InboxWindowDays: 31})},
			wantErr: "window 3651 days outside 0..3650",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			s, err := sweep.New(tt.pool, tt.groups, tt.logger, tt.metrics)
			require.ErrorIs(t, err, sweep.ErrInvalidGroups)
			require.ErrorContains(t, err, tt.wantErr)
			require.Nil(t, s)
			if tt.name == "InvalidPolicy" {
				require.ErrorIs(t, err, prune.ErrInvalidPolicy)
			}
		})
	}
}

func TestReportDeleted(t *testing.T) {
	t.Parallel()

	require.Zero(t, sweep.Report{}.Deleted())
	r := sweep.Report{Tables: []sweep.TableReport{{Deleted: 3}, {Deleted: 0}, {Deleted: 1050}}}
	require.Equal(t, int64(1053), r.Deleted())
}

// TestNewRefusesUnpinnedPool: a sweep's cutoffs are
// computed in the session's zone; a pool whose sessions are not pinned to
// UTC (a DST zone moves now() - 30 days by an hour) is refused.
func TestNewRefusesUnpinnedPool(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	m, err := metrics.NewPrune(prometheus.NewRegistry())
	require.NoError(t, err)
	_, err = sweep.New(pool, []sweep.Group{sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31})},
		slog.New(slog.DiscardHandler), m)
	require.ErrorIs(t, err, pgsession.ErrNotPinned)
}
