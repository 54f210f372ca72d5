package prune

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetirePace drives the pace with a scripted transaction horizon and a
// fake clock: only movement beyond the retirement's own transactions counts
// as another writer; while one was seen within YieldHold each retirement
// waits out the interval since the last; with nobody writing none waits.
func TestRetirePace(t *testing.T) {
	t.Parallel()
	type step struct {
		advance  time.Duration // clock, before the retirement
		wantWait time.Duration // what wait sleeps
		own      int64         // the retirement's own transaction ids
		horizon  int64         // reading after it
		wantPace bool          // pacing after the reading
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "AloneNeverWaits", steps: []step{
			{own: 1, horizon: 101}, {own: 1, horizon: 102}, {own: 0, horizon: 102}, {own: 2, horizon: 104},
		}},
		{name: "WriterSeenPacesThenGone", steps: []step{
			{own: 1, horizon: 103, wantPace: true}, // two others committed
			{advance: 50 * time.Millisecond, wantWait: 200 * time.Millisecond, own: 2, horizon: 105, wantPace: true}, // only its own two
			{advance: 300 * time.Millisecond, own: 2, horizon: 107, wantPace: true},                                  // the interval has passed: no wait
			{advance: 800 * time.Millisecond, wantWait: 0, own: 2, horizon: 109, wantPace: false},                    // YieldHold after the last writer
		}},
		{name: "KeptTakesNoID", steps: []step{
			{own: 0, horizon: 101, wantPace: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now := time.Unix(1_700_000_000, 0)
			var reading int64
			var slept time.Duration
			r := &retirePace{
				horizon:  func(context.Context) (int64, error) { return reading, nil },
				interval: DefaultPartitionPace, last: 100, enabled: true,
				now:   func() time.Time { return now },
				sleep: func(_ context.Context, d time.Duration) error { slept = d; now = now.Add(d); return nil },
			}
			for i, s := range tt.steps {
				now = now.Add(s.advance)
				slept = 0
				require.NoError(t, r.wait(t.Context()))
				require.Equal(t, s.wantWait, slept, "step %d: wait", i)
				reading = s.horizon
				require.NoError(t, r.observe(t.Context(), s.own))
				require.Equal(t, s.wantPace, r.pacing(), "step %d: pacing", i)
			}
		})
	}
	t.Run("Disabled", func(t *testing.T) {
		t.Parallel()
		r := &retirePace{horizon: func(context.Context) (int64, error) { t.Fatal("read the horizon"); return 0, nil }, now: time.Now}
		require.NoError(t, r.observe(t.Context(), 1))
		require.False(t, r.pacing())
		require.NoError(t, r.wait(t.Context()))
	})
}
