package prune

import (
	"context"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
)

// DefaultPartitionPace is the least time between two partition retirements
// while other sessions are committing writes (Policy.YieldToWriters). A
// retirement holds the parent for its DETACH (writers of the table wait a
// millisecond or two) and its drop's commit flushes the WAL and unlinks the
// partition's files, which the writers' commit flushes queue behind: the
// bench measured a writer's p99 at 4.9x its quiet figure with retirements
// back to back. One per interval keeps the share of a writer's commits that
// meet one under the one in a hundred a p99 can absorb; a week of daily
// partitions then takes under 2 s beside a busy service.
const DefaultPartitionPace = 250 * time.Millisecond

// retirePace spaces a call's partition retirements while other sessions
// commit writes, with the signal the batch loop yields on (yieldWatch: the
// server's transaction horizon moved by more than the retirement's own
// transactions). With nobody writing, retirements run back to back and the
// detached partitions are dropped together at the end of the call.
type retirePace struct {
	horizon  func(context.Context) (int64, error)
	interval time.Duration
	last     int64
	seenAt   time.Time
	lastAt   time.Time
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
	enabled  bool
}

func newRetirePace(ctx context.Context, db DB, p Policy) (*retirePace, error) {
	r := &retirePace{horizon: queries.New(db).WriteHorizon, interval: p.partitionPace(), now: time.Now, sleep: sleepCtx, enabled: p.YieldToWriters}
	if !r.enabled {
		return r, nil
	}
	h, err := r.horizon(ctx)
	if err != nil {
		return nil, fmt.Errorf("prune %s: write horizon: %w", p.Table, err)
	}
	r.last = h
	return r, nil
}

// pacing reports whether another session committed a write within
// YieldHold: then each retirement is dropped on its own and the next waits.
func (r *retirePace) pacing() bool {
	return r.enabled && !r.seenAt.IsZero() && r.now().Sub(r.seenAt) < YieldHold
}

// wait sleeps until the pace allows the next retirement.
func (r *retirePace) wait(ctx context.Context) error {
	if !r.pacing() || r.lastAt.IsZero() {
		return nil
	}
	if d := r.interval - r.now().Sub(r.lastAt); d > 0 {
		return r.sleep(ctx, d)
	}
	return nil
}

// observe reads the horizon after a retirement whose own transactions took
// own ids (the detach's, the drop's when it was dropped at once; none when
// the partition was kept): any more movement is another session's write.
func (r *retirePace) observe(ctx context.Context, own int64) error {
	r.lastAt = r.now()
	if !r.enabled {
		return nil
	}
	h, err := r.horizon(ctx)
	if err != nil {
		return fmt.Errorf("write horizon: %w", err)
	}
	if h-r.last > own {
		r.seenAt = r.lastAt
	}
	r.last = h
	return nil
}
