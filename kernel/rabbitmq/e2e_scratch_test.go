package rabbitmq_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craig/retention/kernel/inbox"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestEndToEndOutboxToInboxThroughRabbitMQ runs the whole transport between
// two service databases: stage in the producer's transaction, drain through
// the real publisher, consume with the inbox in front of the handler, then
// deliver the same event twice more (a manual re-publish, and an outbox
// replay drained again). The handler must run exactly once.
func TestEndToEndOutboxToInboxThroughRabbitMQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	producer := kerneltest.NewDB(t, migrations.Transport())
	consumer := kerneltest.NewDB(t, migrations.Transport())
	b := newBroker(t)
	exchange, queue := b.names(t)
	pub := newPublisher(t, b, exchange)

	// The consumer: every delivery passes the probe (so the test sees the
	// duplicates arrive); only the first reaches the handler, whose effect
	// is a follow-up event staged in the consumer's database.
	var runs atomic.Int64
	deliveries := make(chan outbox.Message, 10)
	dedup := inbox.MessageHandler(consumer.Pool, func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		runs.Add(1)
		_, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: "security.evaluations_recorded", Payload: m.Payload})
		return err
	})
	probe := func(ctx context.Context, m outbox.Message) error {
		err := dedup(ctx, m)
		if err == nil {
			deliveries <- m
		}
		return err
	}
	_, logger := newLogRecorder()
	rc := startConsumer(t, b, &rabbitmq.Consumer{Logger: logger}, exchange, queue, []string{"rules.#"}, probe)

	// 1. Stage in the producer's transaction.
	tx, err := producer.Pool.Begin(ctx)
	require.NoError(t, err)
	id, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: "rules.evaluations_archived", Payload: json.RawMessage(`{"batch":42}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	// 2. Drain with the real publisher: confirmed, so stamped.
	drainer := &outbox.Drainer{Pool: producer.Pool, Publisher: pub, Logger: logger}
	rep, err := drainer.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Published: 1}, rep)
	var publishedAt *time.Time
	var msg outbox.Message
	require.NoError(t, producer.Pool.QueryRow(ctx,
		"SELECT id, event_type, payload, created_at, published_at FROM event_outbox WHERE id = $1", id).
		Scan(&msg.ID, &msg.EventType, &msg.Payload, &msg.CreatedAt, &publishedAt))
	require.NotNil(t, publishedAt)

	// 3. The consumer receives it and the handler runs.
	first := receive(t, deliveries)
	require.Equal(t, id, first.ID)
	require.Equal(t, "rules.evaluations_archived", first.EventType)
	require.JSONEq(t, `{"batch":42}`, string(first.Payload))
	require.Equal(t, int64(1), runs.Load())

	// 4. Duplicate delivery: publish the SAME message again by hand.
	require.NoError(t, pub.Publish(ctx, msg))
	require.Equal(t, id, receive(t, deliveries).ID)

	// 5. Duplicate delivery: replay the outbox range and drain it again.
	n, err := outbox.Replay(ctx, producer.Pool, msg.CreatedAt, msg.CreatedAt.Add(time.Microsecond), outbox.ReplayLimits{OutboxWindowDays: 30, MaxAgeDays: 30, MaxRows: 100, BatchSize: 100})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	rep, err = drainer.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.DrainReport{Published: 1}, rep)
	require.Equal(t, id, receive(t, deliveries).ID)

	// Three deliveries, one handler run, one inbox row, one effect.
	require.Equal(t, int64(1), runs.Load(), "the handler ran exactly once")
	require.Equal(t, int64(1), consumer.Count(t, "SELECT count(*) FROM event_inbox"))
	require.Equal(t, int64(1), consumer.Count(t, "SELECT count(*) FROM event_inbox WHERE event_id = $1", id))
	require.Equal(t, int64(1), consumer.Count(t, "SELECT count(*) FROM event_outbox"))

	// Every delivery was acknowledged, the duplicates included.
	require.NoError(t, rc.stop())
	require.Zero(t, b.ready(t, queue))
	require.Zero(t, producer.Count(t, "SELECT count(*) FROM event_outbox WHERE published_at IS NULL"))
}
