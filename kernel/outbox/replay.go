package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
	"github.com/jackc/pgx/v5/pgtype"
)

var (
	// ErrInvalidReplayRange is returned (wrapped) when from is not before to.
	ErrInvalidReplayRange = errors.New("outbox: invalid replay range")
	// ErrReplayOutOfWindow matches a *ReplayOutOfWindowError with errors.Is.
	ErrReplayOutOfWindow = errors.New("outbox: replay range starts before the replay window")
	// ErrReplayTooLarge matches a *ReplayTooLargeError with errors.Is.
	ErrReplayTooLarge = errors.New("outbox: replay range holds more rows than replay_max_rows")
)

// ReplayOutOfWindowError refuses a replay whose range starts before the
// replay window: consumers may have swept the inbox dedup
// records of older events, so replaying them could run their handlers a
// second time.
type ReplayOutOfWindowError struct {
	// WindowDays is the clamp that refused the range: the shorter of the
	// outbox window and replay_max_age_days (see ReplayLimits.WindowDays).
	WindowDays int
	// Cutoff is the oldest created_at a replay may reach, by the database
	// clock.
	Cutoff time.Time
	// From is the start of the refused range.
	From time.Time
}

func (e *ReplayOutOfWindowError) Error() string {
	return fmt.Sprintf("replay range starts before the %d-day replay window (cutoff %s, from %s); older rows may have lost their consumers' dedup records",
		e.WindowDays, e.Cutoff.UTC().Format(time.RFC3339), e.From.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrReplayOutOfWindow) true.
func (e *ReplayOutOfWindowError) Is(target error) bool { return target == ErrReplayOutOfWindow }

// ReplayTooLargeError refuses a replay whose range holds more published rows
// than ReplayLimits.MaxRows: it would flood the broker and every consumer;
// the operator narrows the range instead.
type ReplayTooLargeError struct {
	// Count is the number of rows the range holds.
	Count int64
	// MaxRows is replay_max_rows.
	MaxRows int64
}

func (e *ReplayTooLargeError) Error() string {
	return fmt.Sprintf("replay range holds %d published rows, more than replay_max_rows=%d; narrow the range", e.Count, e.MaxRows)
}

// Is makes errors.Is(err, ErrReplayTooLarge) true.
func (e *ReplayTooLargeError) Is(target error) bool { return target == ErrReplayTooLarge }

// ReplayLimits bound an admin replay.
type ReplayLimits struct {
	// OutboxWindowDays is this service's outbox retention window; 0 means
	// the outbox sweep is disabled.
	OutboxWindowDays int
	// MaxAgeDays is replay_max_age_days: the inbox window the fleet's
	// consumers guarantee, less a margin (1..prune.MaxWindowDays). The clamp
	// never depends on whether this service sweeps its own outbox.
	MaxAgeDays int
	// MaxRows is replay_max_rows: a range holding more rows is refused.
	MaxRows int64
	// BatchSize is the most rows one UPDATE re-queues (the sweep's batch
	// size).
	BatchSize int
}

// WindowDays is the clamp a replay applies: the shorter of the outbox window
// (when the outbox sweep is on) and MaxAgeDays.
func (l ReplayLimits) WindowDays() int {
	if l.OutboxWindowDays > 0 && l.OutboxWindowDays < l.MaxAgeDays {
		return l.OutboxWindowDays
	}
	return l.MaxAgeDays
}

func (l ReplayLimits) validate() error {
	switch {
	case l.OutboxWindowDays < 0 || l.OutboxWindowDays > prune.MaxWindowDays:
		return fmt.Errorf("outbox window %d days outside 0..%d: %w", l.OutboxWindowDays, prune.MaxWindowDays, prune.ErrOutOfRange)
	case l.MaxAgeDays < 1 || l.MaxAgeDays > prune.MaxWindowDays:
		return fmt.Errorf("replay max age %d days outside 1..%d: %w", l.MaxAgeDays, prune.MaxWindowDays, prune.ErrOutOfRange)
	case l.MaxRows < 1:
		return fmt.Errorf("replay max rows %d below 1: %w", l.MaxRows, prune.ErrOutOfRange)
	case l.BatchSize < 1 || l.BatchSize > math.MaxInt32:
		return fmt.Errorf("replay batch size %d outside 1..%d: %w", l.BatchSize, math.MaxInt32, prune.ErrOutOfRange)
	}
	return nil
}

// Replay re-queues the published outbox rows created in [from, to): their
// published_at and last_error are cleared, so the drain publishes them
// again. It returns the number of rows re-queued.
//
// A range starting before now() - lim.WindowDays() (database clock) is
// refused with a *ReplayOutOfWindowError, and a range holding more than
// lim.MaxRows published rows with a *ReplayTooLargeError; either changes
// nothing. Otherwise the rows are re-queued in batches of lim.BatchSize,
// oldest first, each batch its own statement and transaction that repeats
// the clamp and the predicate, so a row that crossed the cutoff between the
// check and its batch is left alone. Cancellation is checked between
// batches: the rows of committed batches stay re-queued (the drain publishes
// them; a replay is at-least-once by design).
func Replay(ctx context.Context, db prune.DB, from, to time.Time, lim ReplayLimits) (int64, error) {
	if !from.Before(to) {
		return 0, fmt.Errorf("%w: from %s is not before to %s", ErrInvalidReplayRange,
			from.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano))
	}
	if err := lim.validate(); err != nil {
		return 0, fmt.Errorf("outbox replay: %w", err)
	}
	window := lim.WindowDays()
	sqlWindow := int32(window)    // validated: 1..MaxWindowDays
	batch := int32(lim.BatchSize) // validated: fits int32
	q := queries.New(db)
	cutoff, err := q.ReplayCutoff(ctx, sqlWindow)
	if err != nil {
		return 0, fmt.Errorf("outbox replay: cutoff: %w", err)
	}
	if from.Before(cutoff.Time) {
		return 0, &ReplayOutOfWindowError{WindowDays: window, Cutoff: cutoff.Time, From: from}
	}
	fromAt := pgtype.Timestamptz{Time: from, Valid: true}
	toAt := pgtype.Timestamptz{Time: to, Valid: true}
	count, err := q.CountReplayable(ctx, queries.CountReplayableParams{FromAt: fromAt, ToAt: toAt, WindowDays: sqlWindow})
	if err != nil {
		return 0, fmt.Errorf("outbox replay: count: %w", err)
	}
	if count > lim.MaxRows {
		return 0, &ReplayTooLargeError{Count: count, MaxRows: lim.MaxRows}
	}
	// The cursor starts just before from: no row has the nil id.
	after := queries.ReplayBatchParams{FromAt: fromAt, ToAt: toAt, WindowDays: sqlWindow, AfterAt: fromAt,
		AfterID: pgtype.UUID{Valid: true}, BatchLimit: batch}
	var replayed int64
	for {
		if err := ctx.Err(); err != nil {
			return replayed, fmt.Errorf("outbox replay: stopped after %d rows: %w", replayed, err)
		}
		rows, err := q.ReplayBatch(ctx, after)
		if err != nil {
			return replayed, fmt.Errorf("outbox replay: batch after %d rows: %w", replayed, err)
		}
		replayed += int64(len(rows))
		if len(rows) < int(batch) {
			return replayed, nil
		}
		// RETURNING has no order: the cursor moves to the batch's last key.
		last := rows[0]
		for _, r := range rows[1:] {
			if keyAfter(r, last) {
				last = r
			}
		}
		after.AfterAt, after.AfterID = last.CreatedAt, last.ID
	}
}

// keyAfter reports whether a's (created_at, id) sorts after b's, as
// PostgreSQL orders them (uuid bytewise).
func keyAfter(a, b queries.ReplayBatchRow) bool {
	if !a.CreatedAt.Time.Equal(b.CreatedAt.Time) {
		return a.CreatedAt.Time.After(b.CreatedAt.Time)
	}
	return bytes.Compare(a.ID.Bytes[:], b.ID.Bytes[:]) > 0
}

// toInt32 is the checked conversion of a count or a window to the int32 a
// query binds it as.
func toInt32(v int) (int32, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %d does not fit int32", prune.ErrOutOfRange, v)
	}
	return int32(v), nil
}
