// Package outbox is the transactional outbox: Stage writes an event in the
// caller's transaction, a Drainer publishes pending rows to the broker and
// stamps them, Replay re-queues a published range (clamped to the retention
// window), and Worker runs the drain every poll tick and the transport sweep
// every PruneEveryTicks ticks, drain first.
//
// Delivery is at least once: a row is stamped only after the broker confirmed
// it, so a crash between confirm and commit publishes it again, and consumers
// deduplicate with the inbox (package inbox).
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// MaxRoutingKeyBytes is the longest routing key AMQP 0-9-1 can carry: it is
// a shortstr, whose length is a single octet.
const MaxRoutingKeyBytes = 255

// Envelope is an event to stage.
type Envelope struct {
	// ID identifies the event end to end (it becomes the AMQP message id and
	// the consumers' inbox key). The zero value means "generate one":
	// Stage assigns a UUIDv7, which sorts by creation time.
	ID uuid.UUID
	// EventType is the routing key, e.g. "rules.evaluations_archived".
	EventType string
	// Payload is the event body; it must be valid JSON.
	Payload json.RawMessage
}

var (
	// ErrInvalidEnvelope is returned (wrapped) by Stage for an envelope that
	// must not be written; nothing is written.
	ErrInvalidEnvelope = errors.New("outbox: invalid envelope")
	// ErrInvalidRoutingKey is returned (wrapped) by ValidateEventType.
	ErrInvalidRoutingKey = errors.New("outbox: invalid routing key")
)

// ValidateEventType reports whether eventType can be used as an AMQP routing
// key: non-empty, at most MaxRoutingKeyBytes bytes of valid UTF-8, and free
// of whitespace and control characters. The error wraps ErrInvalidRoutingKey.
//
// Topic wildcards ('*', '#') are accepted: in a routing key they are literal
// characters, only binding keys give them a meaning.
func ValidateEventType(eventType string) error {
	switch {
	case eventType == "":
		return fmt.Errorf("%w: empty event type", ErrInvalidRoutingKey)
	case len(eventType) > MaxRoutingKeyBytes:
		return fmt.Errorf("%w: event type is %d bytes, the limit is %d", ErrInvalidRoutingKey, len(eventType), MaxRoutingKeyBytes)
	case !utf8.ValidString(eventType):
		return fmt.Errorf("%w: event type %q is not valid UTF-8", ErrInvalidRoutingKey, eventType)
	}
	for i, r := range eventType {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w: event type %q has a space or control character at byte %d", ErrInvalidRoutingKey, eventType, i)
		}
	}
	return nil
}

// Stage writes env to event_outbox on tx and returns the event's id. tx
// should be the caller's transaction, so the event commits or rolls back
// with the change it announces; a pool would autocommit the row on its own.
//
// An envelope with an invalid event type or a payload that is not valid JSON
// is rejected before anything is written, with an error wrapping
// ErrInvalidEnvelope (and, for the event type, ErrInvalidRoutingKey).
func Stage(ctx context.Context, tx prune.DB, env Envelope) (uuid.UUID, error) {
	if err := ValidateEventType(env.EventType); err != nil {
		return uuid.Nil, fmt.Errorf("%w: %w", ErrInvalidEnvelope, err)
	}
	if !json.Valid(env.Payload) {
		return uuid.Nil, fmt.Errorf("%w: %s: payload is not valid JSON", ErrInvalidEnvelope, env.EventType)
	}
	id := env.ID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return uuid.Nil, fmt.Errorf("outbox stage %s: new id: %w", env.EventType, err)
		}
	}
	err := queries.New(tx).StageEvent(ctx, queries.StageEventParams{
		ID:        pgUUID(id),
		EventType: env.EventType,
		Payload:   env.Payload,
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox stage %s %s: %w", env.EventType, id, err)
	}
	return id, nil
}

func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }
