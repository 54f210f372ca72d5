package outbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
	"github.com/jackc/pgx/v5/pgtype"
)

// unclampedWindowDays is the window ReplayRange is given when the outbox
// sweep is disabled (window 0). ReplayRange always clamps, so that the
// statement that acts can never run without its guard; "no clamp" is a
// window far wider than any row can be old: ten times the longest accepted
// retention window, i.e. a century. (A window of math.MaxInt32 days would
// push now() - window before the earliest timestamptz and fail.)
const unclampedWindowDays = prune.MaxWindowDays * 10

var (
	// ErrInvalidReplayRange is returned (wrapped) when from is not before to.
	ErrInvalidReplayRange = errors.New("outbox: invalid replay range")
	// ErrReplayOutOfWindow matches a *ReplayOutOfWindowError with errors.Is.
	ErrReplayOutOfWindow = errors.New("outbox: replay range starts before the outbox retention window")
)

// ReplayOutOfWindowError refuses a replay whose range starts before the
// outbox retention window (seed 000, D4): consumers may have swept the inbox
// dedup records of older events, so replaying them could run their handlers
// a second time.
type ReplayOutOfWindowError struct {
	// WindowDays is the outbox retention window.
	WindowDays int
	// Cutoff is the oldest created_at a replay may reach, by the database
	// clock.
	Cutoff time.Time
	// From is the start of the refused range.
	From time.Time
}

func (e *ReplayOutOfWindowError) Error() string {
	return fmt.Sprintf("replay range starts before the %d-day outbox retention window (cutoff %s, from %s); older rows may have lost their consumers' dedup records",
		e.WindowDays, e.Cutoff.UTC().Format(time.RFC3339), e.From.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrReplayOutOfWindow) true.
func (e *ReplayOutOfWindowError) Is(target error) bool { return target == ErrReplayOutOfWindow }

// Replay re-queues the published outbox rows created in [from, to): their
// published_at and last_error are cleared, so the drain publishes them
// again. It returns the number of rows re-queued.
//
// windowDays is the outbox retention window. When it is positive, a range
// starting before now() - windowDays (database clock) is refused with a
// *ReplayOutOfWindowError and nothing changes; the UPDATE repeats the clamp,
// so a row that crossed the cutoff between the check and the update is left
// alone. windowDays 0 means the outbox sweep is disabled and applies no
// clamp. That is only sound while consumers keep their inbox dedup records
// at least as long as the replayed rows' age: the callers own that check
// (the consumers' windows live in other databases).
func Replay(ctx context.Context, db prune.DB, from, to time.Time, windowDays int) (int64, error) {
	if !from.Before(to) {
		return 0, fmt.Errorf("%w: from %s is not before to %s", ErrInvalidReplayRange,
			from.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano))
	}
	if windowDays < 0 || windowDays > prune.MaxWindowDays {
		return 0, fmt.Errorf("outbox replay: window %d days outside 0..%d: %w", windowDays, prune.MaxWindowDays, prune.ErrOutOfRange)
	}
	q := queries.New(db)
	var sqlWindow int32 = unclampedWindowDays // a constant: the compiler checks it fits
	if windowDays > 0 {
		var err error
		if sqlWindow, err = toInt32(windowDays); err != nil {
			return 0, fmt.Errorf("outbox replay: window: %w", err)
		}
		cutoff, err := q.ReplayCutoff(ctx, sqlWindow)
		if err != nil {
			return 0, fmt.Errorf("outbox replay: cutoff: %w", err)
		}
		if from.Before(cutoff.Time) {
			return 0, &ReplayOutOfWindowError{WindowDays: windowDays, Cutoff: cutoff.Time, From: from}
		}
	}
	n, err := q.ReplayRange(ctx, queries.ReplayRangeParams{
		FromAt:     pgtype.Timestamptz{Time: from, Valid: true},
		ToAt:       pgtype.Timestamptz{Time: to, Valid: true},
		WindowDays: sqlWindow,
	})
	if err != nil {
		return 0, fmt.Errorf("outbox replay: %w", err)
	}
	return n, nil
}

// toInt32 is the checked conversion of a count or a window to the int32 a
// query binds it as.
func toInt32(v int) (int32, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %d does not fit int32", prune.ErrOutOfRange, v)
	}
	return int32(v), nil
}
