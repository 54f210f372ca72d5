package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/metrics"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// DefaultDrainBatch is how many pending rows one DrainOnce claims. The
	// claim transaction holds the row locks while every publish in it waits
	// for its broker confirm, so the batch bounds the lock hold time (a
	// hundred confirm round trips: well under a second on a healthy broker)
	// and how much is published again if the transaction fails after some
	// confirms. At the one-second poll it still moves 100 events/s per
	// replica, and replicas share a backlog through SKIP LOCKED.
	DefaultDrainBatch = 100

	// DefaultPublishTimeout bounds one publish-and-confirm. A healthy broker
	// confirms a persistent message in milliseconds; ten seconds rides out an
	// fsync stall but not a broker that has stopped confirming (memory or
	// disk alarm), and a timeout ends the batch so one stuck broker costs one
	// timeout per drain, not one per claimed row.
	DefaultPublishTimeout = 10 * time.Second

	// finishTimeout bounds each statement that records an outcome the broker
	// already decided (a mark, the commit, the rollback). They run even when
	// the drain's context was cancelled mid-batch: confirms already received
	// are worth recording so shutdown does not publish them again.
	finishTimeout = 5 * time.Second

	// DefaultRetryBackoff and DefaultMaxRetryBackoff space the attempts of
	// a row the broker refused (ADR-075): after its n-th failure a row
	// waits DefaultRetryBackoff * 2^(n-1), at most DefaultMaxRetryBackoff,
	// before the drain claims it again. A second doubling to an hour: a
	// refusal that clears in seconds (a queue at its length limit) is
	// retried at once, one that lasts (a missing binding under mandatory
	// publishing) costs the drain one publish an hour, not one a second.
	DefaultRetryBackoff    = time.Second
	DefaultMaxRetryBackoff = time.Hour
)

// ErrInvalidDrainer is returned (wrapped) by DrainOnce for a Drainer that
// cannot run.
var ErrInvalidDrainer = errors.New("outbox: invalid drainer")

// Drainer publishes pending outbox rows.
type Drainer struct {
	// Pool is the service database.
	Pool *pgxpool.Pool
	// Publisher sends each claimed row to the broker.
	Publisher Publisher
	// BatchSize is the most rows one DrainOnce claims; 0 means
	// DefaultDrainBatch.
	BatchSize int
	// PublishTimeout bounds each publish-and-confirm; 0 means
	// DefaultPublishTimeout.
	PublishTimeout time.Duration
	// Logger receives a WARN per failed or malformed row and an INFO line
	// when a drain published something; nil means slog.Default().
	Logger *slog.Logger
	// Metrics, when set, counts failed publish attempts
	// (outbox_publish_failures_total) and dead letters
	// (event_outbox_dead_lettered_total).
	Metrics *metrics.Outbox
	// MaxAttempts is how many failed publications dead-letter a row
	// (outbox.max_attempts); 0 retries it forever.
	MaxAttempts int
	// RetryBackoff and MaxRetryBackoff space a failed row's attempts; 0
	// means DefaultRetryBackoff and DefaultMaxRetryBackoff.
	RetryBackoff, MaxRetryBackoff time.Duration
}

// DrainReport is the outcome of one DrainOnce.
type DrainReport struct {
	// Published rows were confirmed by the broker and stamped.
	Published int
	// Failed rows could not be published; they stay pending with last_error
	// and one more attempt counted (or are dead-lettered: DeadLettered).
	Failed int
	// Malformed rows can never be published; they were dead-lettered at
	// once with last_error holding the reason, and were NOT delivered.
	Malformed int
	// DeadLettered counts the rows this drain dead-lettered: the malformed
	// ones and the failed ones that reached MaxAttempts.
	DeadLettered int
}

// DrainOnce claims up to BatchSize pending rows (oldest first, rows that
// failed before after fresh ones and only once past their backoff, rows
// locked by another drainer skipped, dead letters never) in one transaction
// and publishes each:
//
//   - confirmed: published_at is stamped and last_error cleared;
//   - failed: one more attempt is counted with last_error and its time
//     (WARN); at MaxAttempts the row is dead-lettered (ERROR). A publish
//     the broker did not confirm in time records its reason and time but
//     counts no attempt (the broker is not answering), and ends the batch;
//   - malformed (an invalid routing key, or the publisher's ErrMalformed):
//     the row is dead-lettered at once (ERROR). A dead letter is never
//     stamped published, so the published sweep never deletes it: it is
//     the evidence of an event that never left (ADR-075).
//
// A publish that times out ends the batch (the broker is not confirming). If
// ctx is cancelled mid-batch, the marks made so far are committed and the
// error wraps ctx.Err(). The report counts rows by outcome; when the error is
// a database error, the marks were rolled back and the rows will be
// published again.
func (d *Drainer) DrainOnce(ctx context.Context) (DrainReport, error) {
	var rep DrainReport
	limit, err := d.batchLimit()
	if err != nil {
		return rep, err
	}
	base, most := d.backoff()
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return rep, fmt.Errorf("outbox drain: begin: %w", err)
	}
	defer func() {
		// A no-op once committed; detached so a cancelled ctx still ends the
		// transaction cleanly and returns the connection to the pool.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	q := queries.New(tx)
	rows, err := q.ClaimPending(ctx, queries.ClaimPendingParams{BatchLimit: limit, BackoffBaseSeconds: base, BackoffMaxSeconds: most})
	if err != nil {
		return rep, fmt.Errorf("outbox drain: claim: %w", err)
	}
	var stop error
	for _, row := range rows {
		m := Message{ID: uuid.UUID(row.ID.Bytes), EventType: row.EventType, Payload: row.Payload, CreatedAt: row.CreatedAt.Time}
		if stop, err = d.drainOne(ctx, q, m, &rep); err != nil {
			return rep, err
		}
		if stop != nil {
			break
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		return rep, errors.Join(fmt.Errorf("outbox drain: commit: %w", err), stop)
	}
	if rep.Published > 0 || rep.DeadLettered > 0 {
		d.logger().InfoContext(ctx, "outbox drained", slog.Int("published", rep.Published), slog.Int("failed", rep.Failed),
			slog.Int("malformed", rep.Malformed), slog.Int("dead_lettered", rep.DeadLettered))
	}
	if d.Metrics != nil {
		d.Metrics.DeadLettered.Add(float64(rep.DeadLettered))
	}
	if stop != nil && (ctx.Err() != nil || errors.Is(stop, ErrUnavailable)) {
		return rep, stop
	}
	return rep, nil
}

// drainOne publishes one claimed row and records the outcome. stop is
// non-nil when the batch must end after this row (ctx cancelled, publish
// timed out); err is non-nil when a mark failed and the transaction is lost.
func (d *Drainer) drainOne(ctx context.Context, q *queries.Queries, m Message, rep *DrainReport) (stop, err error) {
	attrs := func(perr error) []any {
		return []any{slog.String("event_id", m.ID.String()), slog.String("event_type", m.EventType), slog.Any("error", perr)}
	}
	if ctx.Err() != nil {
		// Shutdown: publish nothing more, leave the row as it was.
		return fmt.Errorf("outbox drain: %w", ctx.Err()), nil
	}
	if verr := ValidateEventType(m.EventType); verr != nil {
		return nil, d.markMalformed(ctx, q, m, fmt.Errorf("%w: %w", ErrMalformed, verr), rep, attrs)
	}
	pctx, cancel := context.WithTimeout(ctx, d.publishTimeout())
	perr := d.Publisher.Publish(pctx, m)
	// Timed out: the publisher gave up waiting (its error says so), not a
	// refusal that arrived after the deadline (a nack is an attempt).
	timedOut := errors.Is(perr, context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	switch {
	case perr == nil:
		// The broker has the message: record that even if ctx was cancelled
		// meanwhile, or the next drain publishes it again.
		mctx, cancel := markContext(ctx)
		defer cancel()
		if err := q.MarkPublished(mctx, pgUUID(m.ID)); err != nil {
			return nil, fmt.Errorf("outbox drain: mark %s published: %w", m.ID, err)
		}
		rep.Published++
		return nil, nil
	case errors.Is(perr, ErrMalformed):
		return nil, d.markMalformed(ctx, q, m, perr, rep, attrs)
	case ctx.Err() != nil:
		// Shutdown, not a publish failure: leave the row as it was.
		return fmt.Errorf("outbox drain: %w", ctx.Err()), nil
	}
	if d.Metrics != nil {
		d.Metrics.PublishFailures.Inc()
	}
	if errors.Is(perr, ErrUnavailable) {
		// The broker is down: nothing is wrong with this row, and the rest
		// of the batch would fail the same way. End the batch unmarked.
		return fmt.Errorf("outbox drain: %w", perr), nil
	}
	if timedOut {
		// The broker did not confirm in time: it is not answering (an
		// alarm, a queue that lost its majority), which says nothing about
		// the row. Its reason and time are recorded (it waits behind fresh
		// rows), no attempt is counted, and the batch ends.
		if err := d.recordTimeout(ctx, q, m, perr, rep, attrs); err != nil {
			return nil, err
		}
		return fmt.Errorf("outbox drain: publish of %s timed out: %w", m.ID, perr), nil
	}
	return nil, d.recordFailure(ctx, q, m, perr, rep, attrs)
}

// recordTimeout records a publish the broker did not confirm in time,
// without counting an attempt.
func (d *Drainer) recordTimeout(ctx context.Context, q *queries.Queries, m Message, perr error, rep *DrainReport, attrs func(error) []any) error {
	reason := lastError(perr)
	mctx, cancel := markContext(ctx)
	defer cancel()
	if err := q.RecordPublishTimeout(mctx, queries.RecordPublishTimeoutParams{ID: pgUUID(m.ID), LastError: &reason}); err != nil {
		return fmt.Errorf("outbox drain: record timeout of %s: %w", m.ID, err)
	}
	rep.Failed++
	d.logger().WarnContext(ctx, "outbox publish not confirmed in time; the event stays pending, no attempt counted", attrs(perr)...)
	return nil
}

// recordFailure counts one failed publication of a claimed row, and
// dead-letters it when that was its MaxAttempts-th.
func (d *Drainer) recordFailure(ctx context.Context, q *queries.Queries, m Message, perr error, rep *DrainReport, attrs func(error) []any) error {
	reason := lastError(perr)
	maxAttempts, err := toInt32(d.MaxAttempts)
	if err != nil {
		return fmt.Errorf("%w: max attempts: %w", ErrInvalidDrainer, err)
	}
	mctx, mcancel := markContext(ctx)
	defer mcancel()
	out, err := q.RecordPublishFailure(mctx, queries.RecordPublishFailureParams{ID: pgUUID(m.ID), LastError: &reason, MaxAttempts: maxAttempts})
	if err != nil {
		return fmt.Errorf("outbox drain: record failure of %s: %w", m.ID, err)
	}
	rep.Failed++
	if out.DeadLettered {
		rep.DeadLettered++
		d.logger().ErrorContext(ctx, "outbox event dead-lettered after its last attempt: it stays as evidence and an operator may retry it",
			append(attrs(perr), slog.Int("attempts", int(out.Attempts)))...)
		return nil
	}
	d.logger().WarnContext(ctx, "outbox publish failed; the event stays pending", append(attrs(perr), slog.Int("attempts", int(out.Attempts)))...)
	return nil
}

func (d *Drainer) markMalformed(ctx context.Context, q *queries.Queries, m Message, cause error, rep *DrainReport, attrs func(error) []any) error {
	reason := lastError(cause)
	mctx, cancel := markContext(ctx)
	defer cancel()
	n, err := q.DeadLetter(mctx, queries.DeadLetterParams{ID: pgUUID(m.ID), LastError: &reason})
	if err != nil {
		return fmt.Errorf("outbox drain: dead-letter malformed %s: %w", m.ID, err)
	}
	rep.Malformed++
	rep.DeadLettered += int(n)
	d.logger().ErrorContext(ctx, "outbox event is malformed and can never be published; dead-lettered, never delivered", attrs(cause)...)
	return nil
}

// markContext is the context of one mark statement: not cancelled with ctx,
// because an outcome the broker already decided must be recorded, but
// bounded by finishTimeout.
func markContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
}

// lastError makes an error storable in a text column: PostgreSQL rejects NUL
// bytes and invalid UTF-8, and a row whose failure cannot be recorded would
// abort every drain transaction that claims it.
func lastError(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "")
}

func (d *Drainer) batchLimit() (int32, error) {
	switch {
	case d.Pool == nil || d.Publisher == nil:
		return 0, fmt.Errorf("%w: pool and publisher are required", ErrInvalidDrainer)
	case d.BatchSize < 0:
		return 0, fmt.Errorf("%w: negative batch size %d", ErrInvalidDrainer, d.BatchSize)
	case d.PublishTimeout < 0:
		return 0, fmt.Errorf("%w: negative publish timeout %s", ErrInvalidDrainer, d.PublishTimeout)
	case d.MaxAttempts < 0:
		return 0, fmt.Errorf("%w: negative max attempts %d", ErrInvalidDrainer, d.MaxAttempts)
	case d.RetryBackoff < 0 || d.MaxRetryBackoff < 0:
		return 0, fmt.Errorf("%w: negative retry backoff", ErrInvalidDrainer)
	case d.BatchSize == 0:
		return DefaultDrainBatch, nil
	}
	n, err := toInt32(d.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("%w: batch size: %w", ErrInvalidDrainer, err)
	}
	return n, nil
}

// backoff is the retry backoff's base and ceiling in seconds.
func (d *Drainer) backoff() (base, most float64) {
	return cmp.Or(d.RetryBackoff, DefaultRetryBackoff).Seconds(), cmp.Or(d.MaxRetryBackoff, DefaultMaxRetryBackoff).Seconds()
}

func (d *Drainer) publishTimeout() time.Duration {
	if d.PublishTimeout == 0 {
		return DefaultPublishTimeout
	}
	return d.PublishTimeout
}

func (d *Drainer) logger() *slog.Logger {
	if d.Logger == nil {
		return slog.Default()
	}
	return d.Logger
}

// PendingGauge refreshes outbox_pending_rows and
// outbox_oldest_pending_age_seconds (they show a drain that has stopped; a
// dead letter is not pending) and event_outbox_dead_letter_rows from the
// database, through the drain's partial index on unpublished rows.
func PendingGauge(ctx context.Context, db queries.DBTX, m *metrics.Outbox) error {
	q := queries.New(db)
	st, err := q.PendingStats(ctx)
	if err != nil {
		return fmt.Errorf("outbox pending gauge: %w", err)
	}
	dead, err := q.DeadLetterStats(ctx)
	if err != nil {
		return fmt.Errorf("outbox dead-letter gauge: %w", err)
	}
	m.Pending.Set(float64(st.Pending))
	m.OldestPendingAge.Set(st.OldestAgeSeconds)
	m.DeadLetters.Set(float64(dead))
	return nil
}
