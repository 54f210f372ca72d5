package rabbitmq_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/inbox"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestDeadLettersThroughRabbitMQ: with mandatory publishing, an event no
// queue is bound for is returned by the broker on each attempt and goes dead
// after its attempts, and a body over the broker's limit goes dead at once,
// while the events behind them are delivered; once the binding exists, an
// operator's retry delivers the unroutable one exactly once (the consumer's
// inbox holds one record of it).
func TestDeadLettersThroughRabbitMQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	producer := kerneltest.NewDB(t, migrations.Transport())
	consumer := kerneltest.NewDB(t, migrations.Transport())
	b := newBroker(t)
	exchange, queue := b.names(t)
	pub := newPublisher(t, b, exchange).Mandatory(true)

	deliveries := make(chan outbox.Message, 20)
	dedup := inbox.MessageHandler(consumer.Pool, func(context.Context, pgx.Tx, outbox.Message) error { return nil })
	_, logger := newLogRecorder()
	startConsumer(t, b, &rabbitmq.Consumer{Logger: logger}, exchange, queue, []string{"rules.delivered"}, func(ctx context.Context, m outbox.Message) error {
		err := dedup(ctx, m)
		if err == nil {
			deliveries <- m
		}
		return err
	})

	unroutable, err := outbox.Stage(ctx, producer.Pool, outbox.Envelope{EventType: "rules.unbound", Payload: json.RawMessage(`{"n":0}`)})
	require.NoError(t, err)
	huge, err := outbox.Stage(ctx, producer.Pool, outbox.Envelope{EventType: "rules.delivered",
		Payload: json.RawMessage(`"` + strings.Repeat("x", rabbitmq.MaxBodyBytes) + `"`)})
	require.NoError(t, err)
	var good []uuid.UUID
	for i := range 3 {
		id, err := outbox.Stage(ctx, producer.Pool, outbox.Envelope{EventType: "rules.delivered", Payload: json.RawMessage(`{"n":` + string(rune('1'+i)) + `}`)})
		require.NoError(t, err)
		good = append(good, id)
	}

	d := &outbox.Drainer{Pool: producer.Pool, Publisher: pub, Logger: logger, MaxAttempts: 3, RetryBackoff: time.Nanosecond}
	var total outbox.DrainReport
	for range 6 {
		rep, err := d.DrainOnce(ctx)
		require.NoError(t, err)
		total.Published += rep.Published
		total.Failed += rep.Failed
		total.Malformed += rep.Malformed
		total.DeadLettered += rep.DeadLettered
	}
	require.Equal(t, outbox.DrainReport{Published: 3, Failed: 3, Malformed: 1, DeadLettered: 2}, total)
	got := map[uuid.UUID]bool{}
	for range good {
		got[receive(t, deliveries).ID] = true
	}
	for _, id := range good {
		require.True(t, got[id], "the events behind the poison rows are delivered")
	}
	var lastError string
	require.NoError(t, producer.Pool.QueryRow(ctx, "SELECT last_error FROM event_outbox WHERE id = $1 AND attempts = 3 AND dead_lettered_at IS NOT NULL AND published_at IS NULL", unroutable).Scan(&lastError))
	require.Contains(t, lastError, "no queue is bound")
	require.NoError(t, producer.Pool.QueryRow(ctx, "SELECT last_error FROM event_outbox WHERE id = $1 AND attempts = 1 AND dead_lettered_at IS NOT NULL AND published_at IS NULL", huge).Scan(&lastError))
	require.Contains(t, lastError, "the limit is")

	// The cause is fixed: the consumer's queue is bound for the key. The
	// operator retries it; the drain delivers it once.
	require.NoError(t, b.channel(t).QueueBind(queue, "rules.unbound", exchange, false, nil))
	_, err = outbox.RetryDeadLetter(ctx, producer.Pool, unroutable, "ops:alice")
	require.NoError(t, err)
	rep, err := d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Published: 1}, rep)
	require.Equal(t, unroutable, receive(t, deliveries).ID)
	rep, err = d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{}, rep, "nothing left to publish: the huge one stays a dead letter")
	require.Equal(t, int64(1), consumer.Count(t, "SELECT count(*) FROM event_inbox WHERE event_id = $1", unroutable))
	require.Equal(t, int64(4), consumer.Count(t, "SELECT count(*) FROM event_inbox"))
}
