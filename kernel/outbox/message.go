package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ErrMalformed marks a message that can never be published (or, on the
// consuming side, never be handled): an invalid routing key, a body the
// broker would refuse, a body that does not decode. A Publisher wraps it so
// the Drainer stamps the row instead of retrying it forever.
var ErrMalformed = errors.New("outbox: malformed message")

// Message is one outbox event on the wire. Its JSON form, the AMQP message
// body, is {"id", "event_type", "payload", "created_at"}.
type Message struct {
	ID        uuid.UUID       `json:"id"`
	EventType string          `json:"event_type"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
}

// ErrUnavailable is wrapped by a Publisher's error when the broker cannot
// be reached at all (not connected, waiting for the next reconnect): it says
// nothing about the message, so the drain neither marks the row nor tries
// the rest of the batch, and the publisher has logged the outage itself.
var ErrUnavailable = errors.New("outbox: broker unavailable")

// Publisher sends a message to the broker.
type Publisher interface {
	// Publish returns nil only after the broker confirmed the message. An
	// error wrapping ErrMalformed means the message can never be published;
	// one wrapping ErrUnavailable that the broker cannot be reached; any
	// other error means it may succeed on a later attempt.
	Publish(ctx context.Context, m Message) error
}

// EncodeMessage returns the wire body of m. A message with an invalid event
// type, a nil id or a payload that is not valid JSON is refused with an
// error wrapping ErrMalformed.
func EncodeMessage(m Message) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %s: %w", ErrMalformed, m.ID, err)
	}
	return body, nil
}

// DecodeMessage parses a wire body. A body that is not the wire form, has
// unknown fields, or holds an invalid message is refused with an error
// wrapping ErrMalformed.
func DecodeMessage(body []byte) (Message, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var m Message
	if err := dec.Decode(&m); err != nil {
		return Message{}, fmt.Errorf("%w: decode body: %w", ErrMalformed, err)
	}
	if dec.More() {
		return Message{}, fmt.Errorf("%w: decode body: trailing data after the message", ErrMalformed)
	}
	if err := m.validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

func (m Message) validate() error {
	if m.ID == uuid.Nil {
		return fmt.Errorf("%w: nil id", ErrMalformed)
	}
	if err := ValidateEventType(m.EventType); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformed, m.ID, err)
	}
	if !json.Valid(m.Payload) {
		return fmt.Errorf("%w: %s: payload is not valid JSON", ErrMalformed, m.ID)
	}
	return nil
}
