package rabbitmq

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/outbox"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// unreachableURL points at a local port nothing listens on.
const unreachableURL = "amqp://guest:guest@127.0.0.1:1/"

// TestPublishRefusesMalformedMessagesWithoutABroker uses a publisher that
// was never connected: a malformed message must be refused before any
// broker is involved.
func TestPublishRefusesMalformedMessagesWithoutABroker(t *testing.T) {
	t.Parallel()
	valid := outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: "rules.evaluated", Payload: json.RawMessage(`{}`), CreatedAt: time.Now()}
	tests := []struct {
		name   string
		mutate func(*outbox.Message)
	}{
		{name: "routing key with a space", mutate: func(m *outbox.Message) { m.EventType = "rules evaluated" }},
		{name: "routing key over 255 bytes", mutate: func(m *outbox.Message) { m.EventType = strings.Repeat("r", 256) }},
		{name: "empty routing key", mutate: func(m *outbox.Message) { m.EventType = "" }},
		{name: "payload not JSON", mutate: func(m *outbox.Message) { m.Payload = json.RawMessage(`{`) }},
		{name: "nil id", mutate: func(m *outbox.Message) { m.ID = uuid.Nil }},
		{name: "body over MaxBodyBytes", mutate: func(m *outbox.Message) {
			m.Payload = json.RawMessage(`"` + strings.Repeat("x", MaxBodyBytes) + `"`)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := valid
			tc.mutate(&m)
			err := (&Publisher{}).Publish(context.Background(), m)
			require.ErrorIs(t, err, outbox.ErrMalformed)
		})
	}
}

func TestNewPublisherFailsFastWhenTheBrokerIsUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := NewPublisher(ctx, unreachableURL, "craig.events", nil)
	require.Error(t, err)
	require.Nil(t, p)
	require.NotContains(t, err.Error(), "guest:guest", "the password must not leak into errors")

	_, err = NewPublisher(ctx, unreachableURL, "", nil)
	require.ErrorContains(t, err, "exchange name")
}

func TestConsumeValidatesItsArguments(t *testing.T) {
	t.Parallel()
	handle := func(context.Context, outbox.Message) error { return nil }
	tests := []struct {
		name     string
		c        Consumer
		exchange string
		queue    string
		keys     []string
		handle   HandleFunc
	}{
		{name: "no exchange", queue: "q", keys: []string{"#"}, handle: handle},
		{name: "no queue", exchange: "x", keys: []string{"#"}, handle: handle},
		{name: "no binding keys", exchange: "x", queue: "q", handle: handle},
		{name: "no handler", exchange: "x", queue: "q", keys: []string{"#"}},
		{name: "negative prefetch", c: Consumer{Prefetch: -1}, exchange: "x", queue: "q", keys: []string{"#"}, handle: handle},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.c.Consume(context.Background(), unreachableURL, tc.exchange, tc.queue, tc.keys, tc.handle)
			require.ErrorIs(t, err, ErrInvalidConsumer)
		})
	}
}

func TestConsumeFailsFastWhenTheBrokerIsUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := (&Consumer{}).Consume(ctx, unreachableURL, "x", "q", []string{"#"}, func(context.Context, outbox.Message) error { return nil })
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrInvalidConsumer)
}

// TestDialErrorRedactsThePassword: a failed dial names the broker without
// its password (settings.Redact, the one redaction of the kernel).
func TestDialErrorRedactsThePassword(t *testing.T) {
	t.Parallel()
	_, err := dial(context.Background(), "amqp://guest:Sup3rS3cret@127.0.0.1:1/")
	require.Error(t, err)
	require.Contains(t, err.Error(), "amqp://guest:xxxxx@127.0.0.1:1/")
	require.NotContains(t, err.Error(), "Sup3rS3cret")
}

// TestLazyPublisherBacksOff: with
// the broker unreachable NewLazyPublisher returns a publisher (serve boots),
// a publish between retries fails at once with outbox.ErrUnavailable
// without dialling, and the wait doubles from 1 s to at most 30 s.
func TestLazyPublisherBacksOff(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens: connection refused
	var logs bytes.Buffer
	p, err := NewLazyPublisher(context.Background(), "amqp://guest:guest@"+addr+"/", "craig.events", slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.False(t, p.Connected())
	require.Contains(t, logs.String(), "cannot reach the broker")
	require.NotContains(t, logs.String(), "guest:guest", "the password is not logged")

	clock := time.Now()
	p.mu.Lock()
	p.now = func() time.Time { return clock }
	first := p.backoff
	p.nextDial = clock.Add(first)
	p.mu.Unlock()
	require.Equal(t, minReconnectBackoff, first)

	m := outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: "case.updated", Payload: []byte(`{}`), CreatedAt: clock}
	start := time.Now()
	err = p.Publish(context.Background(), m)
	require.ErrorIs(t, err, outbox.ErrUnavailable)
	require.Contains(t, err.Error(), "next reconnect in")
	require.Less(t, time.Since(start), 100*time.Millisecond, "no dial between retries")

	waits := []time.Duration{first}
	for range 7 {
		clock = clock.Add(time.Hour) // past any retry time: the next publish dials
		err := p.Publish(context.Background(), m)
		require.ErrorIs(t, err, outbox.ErrUnavailable)
		p.mu.Lock()
		waits = append(waits, p.backoff)
		p.mu.Unlock()
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		maxReconnectBackoff, maxReconnectBackoff, maxReconnectBackoff}, waits)
}
