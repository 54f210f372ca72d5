package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

func TestPublisherDeclaresADurableTopicExchange(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, _ := b.names(t)
	newPublisher(t, b, exchange)

	// Re-declaring with the same properties succeeds; with different ones the
	// broker refuses (406), which proves what was declared.
	require.NoError(t, b.channel(t).ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	err := b.channel(t).ExchangeDeclare(exchange, amqp.ExchangeTopic, false, false, false, false, nil)
	var aerr *amqp.Error
	require.True(t, errors.As(err, &aerr), "a transient re-declaration must be refused: %v", err)
	require.Equal(t, amqp.PreconditionFailed, aerr.Code)
}

func TestPublisherPublishesWithTheOutboxProperties(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	b.bind(t, exchange, queue, nil, "rules.#")
	p := newPublisher(t, b, exchange)
	m := newMessage("rules.evaluations_archived")

	require.NoError(t, p.Publish(context.Background(), m))

	// The confirm means the message is enqueued: no waiting needed.
	d, ok := b.get(t, queue)
	require.True(t, ok)
	require.Equal(t, exchange, d.Exchange)
	require.Equal(t, "rules.evaluations_archived", d.RoutingKey)
	require.Equal(t, m.ID.String(), d.MessageId)
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	got, err := outbox.DecodeMessage(d.Body)
	require.NoError(t, err)
	require.Equal(t, m.ID, got.ID)
	require.Equal(t, m.EventType, got.EventType)
	require.JSONEq(t, string(m.Payload), string(got.Payload))
	require.True(t, m.CreatedAt.Equal(got.CreatedAt))
}

func TestPublisherRefusesMalformedMessagesWithoutPublishing(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	b.bind(t, exchange, queue, nil, "#")
	p := newPublisher(t, b, exchange)
	ctx := context.Background()

	for _, key := range []string{"rules evaluated", strings.Repeat("k", 256)} {
		err := p.Publish(ctx, newMessage(key))
		require.ErrorIs(t, err, outbox.ErrMalformed)
	}
	good := newMessage("rules.evaluated")
	require.NoError(t, p.Publish(ctx, good), "a refusal leaves the publisher usable")

	d, ok := b.get(t, queue)
	require.True(t, ok)
	require.Equal(t, good.ID.String(), d.MessageId, "nothing malformed reached the queue")
	_, ok = b.get(t, queue)
	require.False(t, ok)
}

func TestPublisherReportsANack(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	// A queue that rejects every publish makes the broker nack.
	b.bind(t, exchange, queue, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}, "#")
	p := newPublisher(t, b, exchange)

	err := p.Publish(context.Background(), newMessage("rules.evaluated"))
	require.ErrorIs(t, err, rabbitmq.ErrNacked)
	require.NotErrorIs(t, err, outbox.ErrMalformed, "a nack may succeed later: it is not malformed")
}

// TestPublisherRecoversFromAChannelClosedByTheBroker deletes the exchange
// under the publisher: the broker closes the channel on the next publish,
// which fails, and the publish after that reconnects and re-declares.
func TestPublisherRecoversFromAChannelClosedByTheBroker(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	p := newPublisher(t, b, exchange)
	ctx := context.Background()
	require.NoError(t, b.channel(t).ExchangeDelete(exchange, false, false))

	err := p.Publish(ctx, newMessage("rules.evaluated"))
	require.ErrorContains(t, err, "NOT_FOUND")
	require.NotErrorIs(t, err, outbox.ErrMalformed)

	require.NoError(t, p.Publish(ctx, newMessage("rules.evaluated")), "the next publish reconnects")
	b.bind(t, exchange, queue, nil, "#") // the exchange exists again: it was re-declared
	m := newMessage("rules.evaluated")
	require.NoError(t, p.Publish(ctx, m))
	d, ok := b.get(t, queue)
	require.True(t, ok)
	require.Equal(t, m.ID.String(), d.MessageId)
}

func TestPublisherReconnectsAfterTheConnectionDrops(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	b.bind(t, exchange, queue, nil, "#")
	p := newPublisher(t, b, exchange)
	ctx := context.Background()

	require.NoError(t, p.Publish(ctx, newMessage("rules.evaluated")))
	require.NoError(t, p.CloseConnection())
	m := newMessage("rules.evaluated")
	require.NoError(t, p.Publish(ctx, m), "the next publish reconnects")
	require.Equal(t, 2, b.ready(t, queue))
}

func TestPublisherClose(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, _ := b.names(t)
	p, err := rabbitmq.NewPublisher(context.Background(), b.url, exchange, nil)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "closing twice is harmless")
	err = p.Publish(context.Background(), newMessage("rules.evaluated"))
	require.ErrorIs(t, err, rabbitmq.ErrPublisherClosed)
}
