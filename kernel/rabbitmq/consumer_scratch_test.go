package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// channelHandler hands every message to the returned channel and succeeds.
func channelHandler() (rabbitmq.HandleFunc, <-chan outbox.Message) {
	got := make(chan outbox.Message, 100)
	return func(_ context.Context, m outbox.Message) error {
		got <- m
		return nil
	}, got
}

func TestConsumerAcksHandledMessages(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	p := newPublisher(t, b, exchange)
	handle, got := channelHandler()
	_, logger := newLogRecorder()
	rc := startConsumer(t, b, &rabbitmq.Consumer{Logger: logger}, exchange, queue, []string{"rules.*"}, handle)

	ctx := context.Background()
	want := []outbox.Message{newMessage("rules.evaluated"), newMessage("rules.archived")}
	for _, m := range want {
		require.NoError(t, p.Publish(ctx, m))
	}
	require.NoError(t, p.Publish(ctx, newMessage("security.audited")), "not bound: never delivered")
	for _, m := range want {
		gotM := receive(t, got)
		require.Equal(t, m.ID, gotM.ID)
		require.Equal(t, m.EventType, gotM.EventType)
		require.JSONEq(t, string(m.Payload), string(gotM.Payload))
	}

	require.NoError(t, rc.stop())
	require.Zero(t, b.ready(t, queue), "acknowledged messages are not requeued when the consumer stops")
	require.Empty(t, got)
}

func TestConsumerRequeuesWhenTheHandlerFails(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	p := newPublisher(t, b, exchange)

	var mu sync.Mutex
	attempts := map[uuid.UUID]int{}
	done := make(chan outbox.Message, 1)
	handle := func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		attempts[m.ID]++
		n := attempts[m.ID]
		mu.Unlock()
		if n == 1 {
			return errors.New("database unavailable")
		}
		done <- m
		return nil
	}
	rec, logger := newLogRecorder()
	rc := startConsumer(t, b, &rabbitmq.Consumer{Logger: logger}, exchange, queue, []string{"#"}, handle)

	m := newMessage("rules.evaluated")
	require.NoError(t, p.Publish(context.Background(), m))
	require.Equal(t, m.ID, receive(t, done).ID)
	require.NoError(t, rc.stop())

	mu.Lock()
	require.Equal(t, 2, attempts[m.ID], "failed once, redelivered, handled")
	mu.Unlock()
	require.Equal(t, []string{"rabbitmq handler failed; message requeued"}, rec.at(slog.LevelWarn))
	require.Zero(t, b.ready(t, queue))
}

func TestConsumerRejectsUndecodableBodiesWithoutRequeue(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	p := newPublisher(t, b, exchange)
	handle, got := channelHandler()
	rec, logger := newLogRecorder()
	rc := startConsumer(t, b, &rabbitmq.Consumer{Logger: logger}, exchange, queue, []string{"#"}, handle)

	b.publishRaw(t, exchange, "rules.evaluated", []byte("not json"))
	good := newMessage("rules.evaluated")
	require.NoError(t, p.Publish(context.Background(), good))

	select {
	case r := <-rec.errors:
		require.Equal(t, "rabbitmq message does not decode; rejected without requeue", r.Message)
	case <-time.After(waitLimit):
		t.Fatal("no ERROR logged for the undecodable body")
	}
	require.Equal(t, good.ID, receive(t, got).ID, "the handler only sees decodable messages, and the queue moves on")

	require.NoError(t, rc.stop())
	require.Len(t, rec.at(slog.LevelError), 1, "rejected once, not redelivered")
	require.Zero(t, b.ready(t, queue), "the undecodable message was not requeued")
	require.Empty(t, got)
}

func TestConsumeReturnsWhenCancelled(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	handle, _ := channelHandler()
	_, logger := newLogRecorder()
	rc := startConsumer(t, b, &rabbitmq.Consumer{Logger: logger}, exchange, queue, []string{"#"}, handle)

	require.NoError(t, rc.stop(), "Consume returns nil on cancel")
	b.waitConsumers(t, queue, 0)
}

// TestConsumeResumesAfterTheQueueIsDeleted: the broker cancels the consumer
// of a deleted queue; Consume reconnects, re-declares and goes on.
func TestConsumeResumesAfterTheQueueIsDeleted(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	p := newPublisher(t, b, exchange)
	handle, got := channelHandler()
	rec, logger := newLogRecorder()
	startConsumer(t, b, &rabbitmq.Consumer{Logger: logger}, exchange, queue, []string{"#"}, handle)

	_, err := b.channel(t).QueueDelete(queue, false, false, false)
	require.NoError(t, err)
	b.waitConsumers(t, queue, 1) // re-declared, bound and consumed again

	m := newMessage("rules.evaluated")
	require.NoError(t, p.Publish(context.Background(), m))
	require.Equal(t, m.ID, receive(t, got).ID)
	require.Contains(t, rec.at(slog.LevelWarn), "rabbitmq consumer lost its session; reconnecting")
	require.Contains(t, rec.at(slog.LevelInfo), "rabbitmq consumer reconnected")
}
