// Package inbox deduplicates received events: the event's id is inserted
// into event_inbox in the same transaction as the handler's writes, so an
// event delivered twice (broker redelivery, outbox replay, a publish repeated
// after a lost confirm) changes the database once.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/outbox"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// rollbackTimeout bounds the rollback of a receive whose context was
// cancelled; the server rolls back on its own when the connection goes away.
const rollbackTimeout = 5 * time.Second

// ErrInvalidEvent is returned (wrapped) by Receive for an event that cannot
// be recorded; nothing is written and the handler does not run.
var ErrInvalidEvent = errors.New("inbox: invalid event")

// Event identifies a received event.
type Event struct {
	// ID is the event's outbox id (the AMQP message id); the dedup key.
	ID uuid.UUID
	// EventType is recorded with the id for operators.
	EventType string
}

// HandleFunc applies an event's effects on tx, the transaction that also
// records the event as received.
type HandleFunc func(ctx context.Context, tx pgx.Tx) error

// Receive records ev in event_inbox and runs handle in the same transaction.
//
//   - First delivery: the insert claims the id, handle runs, and both commit
//     together; duplicate is false.
//   - Later delivery: the insert affects no row, the transaction is rolled
//     back and handle does NOT run; duplicate is true and err nil.
//   - handle fails: everything rolls back, including the inbox row, so a
//     redelivery runs handle again; err wraps handle's error.
//
// Two concurrent deliveries of one id serialise on the primary key: the
// second insert waits for the first transaction and then finds the row
// (duplicate) or, if the first rolled back, claims it.
func Receive(ctx context.Context, pool *pgxpool.Pool, ev Event, handle HandleFunc) (duplicate bool, err error) {
	switch {
	case pool == nil || handle == nil:
		return false, fmt.Errorf("%w: pool and handler are required", ErrInvalidEvent)
	case ev.ID == uuid.Nil:
		return false, fmt.Errorf("%w: nil id", ErrInvalidEvent)
	case ev.EventType == "":
		return false, fmt.Errorf("%w: %s: empty event type", ErrInvalidEvent, ev.ID)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox receive %s: begin: %w", ev.ID, err)
	}
	defer func() {
		// A no-op after commit; detached so a cancelled ctx still ends the
		// transaction and returns the connection to the pool.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	n, err := queries.New(tx).RecordReceived(ctx, queries.RecordReceivedParams{
		EventID:   pgtype.UUID{Bytes: ev.ID, Valid: true},
		EventType: ev.EventType,
	})
	if err != nil {
		return false, fmt.Errorf("inbox receive %s: record: %w", ev.ID, err)
	}
	if n == 0 {
		return true, nil
	}
	if err := handle(ctx, tx); err != nil {
		return false, fmt.Errorf("inbox receive %s %s: handler: %w", ev.EventType, ev.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("inbox receive %s: commit: %w", ev.ID, err)
	}
	return false, nil
}

// MessageHandler adapts a transactional message handler to the consumer
// signature (rabbitmq.Consumer): each message goes through Receive, so a
// duplicate delivery is acknowledged without running handle again, and a
// failed handle returns an error (the consumer requeues the message).
func MessageHandler(pool *pgxpool.Pool, handle func(ctx context.Context, tx pgx.Tx, m outbox.Message) error) func(ctx context.Context, m outbox.Message) error {
	return func(ctx context.Context, m outbox.Message) error {
		_, err := Receive(ctx, pool, Event{ID: m.ID, EventType: m.EventType}, func(ctx context.Context, tx pgx.Tx) error {
			return handle(ctx, tx, m)
		})
		return err
	}
}
