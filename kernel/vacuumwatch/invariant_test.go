package vacuumwatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/vacuumwatch"
)

// reading is a database with two sessions, a prepared transaction and a
// slot holding the horizon, two slots retaining WAL and two swept tables.
func reading() vacuumwatch.Report {
	return vacuumwatch.Report{
		Holders: []vacuumwatch.Holder{
			{Kind: vacuumwatch.HolderBackend, Name: "41", XminAge: 900, HeldSeconds: 7200},
			{Kind: vacuumwatch.HolderPrepared, Name: "gid", XminAge: 500, HeldSeconds: 4000},
			{Kind: vacuumwatch.HolderBackend, Name: "42", XminAge: 10, HeldSeconds: 30},
			{Kind: vacuumwatch.HolderSlot, Name: "stale", XminAge: 5000, HeldSeconds: 0},
		},
		Slots: []vacuumwatch.Slot{
			{Name: "stale", Type: "logical", RetainedBytes: 20 << 30},
			{Name: "standby", Type: "physical", Active: true, RetainedBytes: 16 << 20},
		},
		DeadTuples: map[string]int64{"event_outbox": 2_000_000, "event_inbox": 10},
		LiveTuples: map[string]int64{"event_outbox": 5, "event_inbox": 10},
	}
}

func TestInvariants(t *testing.T) {
	t.Parallel()
	rep := reading()
	tests := []struct {
		name              string
		limits            vacuumwatch.Limits
		held, slots       int64
		oldest            float64
		heldOff, slotsOff bool
	}{
		{"an hour and 10 GiB: the session, the prepared transaction, the stale slot", vacuumwatch.Limits{MaxHeld: time.Hour, MaxSlotWALBytes: 10 << 30}, 2, 1, 7200, false, false},
		{"two hours and a bit, 32 GiB: none", vacuumwatch.Limits{MaxHeld: 7201 * time.Second, MaxSlotWALBytes: 32 << 30}, 0, 0, 0, false, false},
		{"a minute and 1 MiB: not the 30-second session; both slots", vacuumwatch.Limits{MaxHeld: time.Minute, MaxSlotWALBytes: 1 << 20}, 2, 2, 7200, false, false},
		{"16 MiB exactly is not over", vacuumwatch.Limits{MaxHeld: time.Hour, MaxSlotWALBytes: 16 << 20}, 2, 1, 7200, false, false},
		{"0 disables each", vacuumwatch.Limits{}, 0, 0, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := vacuumwatch.Invariants(rep, tt.limits)
			require.Len(t, res, 2)
			require.Equal(t, vacuumwatch.InvariantNames(), []string{res[0].Name, res[1].Name})
			held, slots := res[0], res[1]
			require.Equal(t, tt.heldOff, held.Disabled)
			require.Equal(t, tt.slotsOff, slots.Disabled)
			require.Equal(t, tt.held, held.Violations)
			require.Equal(t, tt.slots, slots.Violations)
			require.Equal(t, tt.limits.MaxSlotWALBytes, slots.WALThresholdBytes)
			require.Nil(t, slots.OldestAgeSeconds, "a slot's hold has no age the server knows")
			if tt.held == 0 {
				require.Nil(t, held.OldestAgeSeconds)
				return
			}
			require.InDelta(t, tt.oldest, *held.OldestAgeSeconds, 0.001)
		})
	}
	oldest := rep.Oldest()
	require.Equal(t, "41", oldest[vacuumwatch.HolderBackend].Name, "the oldest backend by xmin age")
	require.Equal(t, int64(5000), oldest[vacuumwatch.HolderSlot].XminAge)
}

func TestFindings(t *testing.T) {
	t.Parallel()
	got := vacuumwatch.Findings(reading(), vacuumwatch.Limits{MaxHeld: time.Hour, MaxSlotWALBytes: 10 << 30, MaxDeadTuples: 1_000_000})
	type brief struct{ kind, holder, name string }
	var briefs []brief
	for _, f := range got {
		briefs = append(briefs, brief{f.Kind, f.Holder, f.Name})
		require.Greater(t, f.Value, f.Limit, "a finding is over its limit: %s", f)
	}
	require.Equal(t, []brief{
		{vacuumwatch.FindingHorizonHeld, vacuumwatch.HolderBackend, "41"},
		{vacuumwatch.FindingHorizonHeld, vacuumwatch.HolderPrepared, "gid"},
		{vacuumwatch.FindingSlotWAL, "", "stale"},
		{vacuumwatch.FindingDeadTuples, "", "event_outbox"},
	}, briefs)
	require.Contains(t, got[0].String(), "backend 41 holds the xmin horizon for 2h0m0s (limit 1h0m0s, 900 transactions)")
	require.Contains(t, got[3].String(), "event_outbox holds 2000000 dead tuples (limit 1000000)")
	require.Empty(t, vacuumwatch.Findings(reading(), vacuumwatch.Limits{}), "every limit 0: nothing is checked")
}
