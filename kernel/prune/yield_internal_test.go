package prune

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestYieldWatch drives the watch with a scripted transaction horizon and a
// fake clock: only movement beyond the batch's own transaction counts as
// another writer, and a writer seen keeps batches small for YieldHold.
func TestYieldWatch(t *testing.T) {
	t.Parallel()

	type step struct {
		advance  time.Duration // clock, before the batch
		horizon  int64         // reading after the batch
		wrote    bool          // the batch took a transaction id
		wantSeen bool          // another writer seen
		wantNext bool          // the next batch yields
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "AloneAtFullSizeAfterTheProbe", steps: []step{
			{horizon: 101, wrote: true, wantNext: true}, // still within YieldProbe
			{advance: YieldProbe, horizon: 102, wrote: true, wantNext: false},
			{horizon: 103, wrote: true},
			{horizon: 103, wrote: false}, // the last, short batch deleted nothing
		}},
		{name: "WriterSeenThenGone", steps: []step{
			{advance: YieldProbe, horizon: 101, wrote: true},
			{horizon: 104, wrote: true, wantSeen: true, wantNext: true}, // two others committed
			{advance: 500 * time.Millisecond, horizon: 105, wrote: true, wantNext: true},
			{advance: 501 * time.Millisecond, horizon: 106, wrote: true, wantNext: false}, // YieldHold has passed
		}},
		{name: "EmptyBatchCountsNoOwnID", steps: []step{
			{horizon: 101, wrote: false, wantSeen: true, wantNext: true},
		}},
		{name: "SteadyWriterKeepsYielding", steps: []step{
			{horizon: 102, wrote: true, wantSeen: true, wantNext: true},
			{advance: 900 * time.Millisecond, horizon: 104, wrote: true, wantSeen: true, wantNext: true},
			{advance: 900 * time.Millisecond, horizon: 106, wrote: true, wantSeen: true, wantNext: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now := time.Unix(1_700_000_000, 0)
			next := int64(100)
			w := &yieldWatch{
				horizon: func(context.Context) (int64, error) { return next, nil },
				now:     func() time.Time { return now },
				enabled: true,
			}
			require.NoError(t, w.read(context.Background()))
			w.until = now.Add(YieldProbe) // as newYieldWatch does
			small, forWriter := w.yielding()
			require.True(t, small, "a call starts small, within YieldProbe")
			require.False(t, forWriter, "no writer seen yet")
			for i, s := range tt.steps {
				now = now.Add(s.advance)
				next = s.horizon
				seen, err := w.observe(context.Background(), s.wrote)
				require.NoError(t, err)
				require.Equal(t, s.wantSeen, seen, "step %d: another writer seen", i+1)
				small, forWriter := w.yielding()
				require.Equal(t, s.wantNext, small, "step %d: next batch yields", i+1)
				require.Equal(t, s.wantNext && w.seen, forWriter, "step %d: yields for a writer", i+1)
			}
		})
	}

	t.Run("Disabled", func(t *testing.T) {
		t.Parallel()
		w, err := newYieldWatch(context.Background(), nil, false)
		require.NoError(t, err, "a disabled watch reads nothing (no DB needed)")
		seen, err := w.observe(context.Background(), true)
		require.NoError(t, err)
		require.False(t, seen)
		small, _ := w.yielding()
		require.False(t, small)
	})

	t.Run("ReadError", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		w := &yieldWatch{horizon: func(context.Context) (int64, error) { return 0, boom }, now: time.Now, enabled: true}
		_, err := w.observe(context.Background(), true)
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, "write horizon")
	})
}
