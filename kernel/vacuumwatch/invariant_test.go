package vacuumwatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/vacuumwatch"
)

func TestInvariant(t *testing.T) {
	t.Parallel()
	rep := vacuumwatch.Report{Holders: []vacuumwatch.Holder{
		{Kind: vacuumwatch.HolderBackend, Name: "41", XminAge: 900, HeldSeconds: 7200},
		{Kind: vacuumwatch.HolderPrepared, Name: "gid", XminAge: 500, HeldSeconds: 4000},
		{Kind: vacuumwatch.HolderBackend, Name: "42", XminAge: 10, HeldSeconds: 30},
		{Kind: vacuumwatch.HolderSlot, Name: "stale", XminAge: 5000, HeldSeconds: 0},
	}}
	tests := []struct {
		name       string
		maxHeld    time.Duration
		violations int64
		oldest     float64
		disabled   bool
	}{
		{"an hour: the session and the prepared transaction", time.Hour, 2, 7200, false},
		{"two hours and a bit: none", 7201 * time.Second, 0, 0, false},
		{"a minute: not the 30-second session, not the slot", time.Minute, 2, 7200, false},
		{"0 disables it", 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := vacuumwatch.Invariant(rep, tt.maxHeld)
			require.Equal(t, vacuumwatch.InvariantName, res.Name)
			require.Equal(t, tt.disabled, res.Disabled)
			require.Equal(t, tt.violations, res.Violations)
			if tt.violations == 0 {
				require.Nil(t, res.OldestAgeSeconds)
				return
			}
			require.InDelta(t, tt.oldest, *res.OldestAgeSeconds, 0.001)
		})
	}
	oldest := rep.Oldest()
	require.Equal(t, "41", oldest[vacuumwatch.HolderBackend].Name, "the oldest backend by xmin age")
	require.Equal(t, int64(5000), oldest[vacuumwatch.HolderSlot].XminAge)
}
