package sweep_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
)

func TestBoundsApply(t *testing.T) {
	t.Parallel()

	own := policy("own")
	own.BatchSize, own.CycleCap, own.StatementTimeout, own.LockTimeout = 7, 70, time.Minute, 2*time.Second
	groups := []sweep.Group{
		sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31}),
		{Name: "local", LockKey: 7, Policies: []prune.Policy{own, policy("plain")}},
	}
	b := sweep.Bounds{BatchSize: 500, CycleCap: 5000, StatementTimeout: 30 * time.Second, LockTimeout: 5 * time.Second}
	got := b.Apply(groups)

	require.Len(t, got, 2)
	for _, p := range []prune.Policy{got[0].Policies[0], got[0].Policies[1], got[1].Policies[1]} {
		require.Equal(t, 500, p.BatchSize, p.Table)
		require.Equal(t, int64(5000), p.CycleCap, p.Table)
		require.Equal(t, 30*time.Second, p.StatementTimeout, p.Table)
		require.Equal(t, 5*time.Second, p.LockTimeout, p.Table)
	}
	require.Equal(t, own.BatchSize, got[1].Policies[0].BatchSize, "a policy's own value wins")
	require.Equal(t, own.CycleCap, got[1].Policies[0].CycleCap)
	require.Equal(t, own.StatementTimeout, got[1].Policies[0].StatementTimeout)
	require.Equal(t, own.LockTimeout, got[1].Policies[0].LockTimeout)

	// The input is not modified: Apply copies the policies.
	require.Zero(t, groups[0].Policies[0].BatchSize)
	require.Zero(t, groups[1].Policies[1].LockTimeout)
	// Everything else is carried over.
	require.Equal(t, groups[0].Name, got[0].Name)
	require.Equal(t, groups[0].LockKey, got[0].LockKey)
	require.Equal(t, groups[0].Policies[0].Eligible, got[0].Policies[0].Eligible)
	require.Equal(t, groups[0].Policies[0].WindowDays, got[0].Policies[0].WindowDays)

	require.Equal(t, withoutFuncs(groups), withoutFuncs(sweep.Bounds{}.Apply(groups)), "zero bounds change nothing")
}

// withoutFuncs drops the batch deletes, which reflect cannot compare.
func withoutFuncs(groups []sweep.Group) []sweep.Group {
	out := make([]sweep.Group, len(groups))
	for i, g := range groups {
		ps := make([]prune.Policy, len(g.Policies))
		for j, p := range g.Policies {
			p.DeleteBatch = nil
			ps[j] = p
		}
		g.Policies = ps
		out[i] = g
	}
	return out
}
