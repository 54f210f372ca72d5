package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// waitLimit bounds every wait for a signal; it is a deadline, not a sleep.
const waitLimit = 15 * time.Second

// pollEvery is how often a polled condition is re-checked.
const pollEvery = 20 * time.Millisecond

// broker is a test's view of the RabbitMQ server: an admin connection and
// the names it must delete when the test ends.
type broker struct {
	url  string
	conn *amqp.Connection
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	url := kerneltest.AMQPURL(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &broker{url: url, conn: conn}
}

// names returns an exchange and a queue name unique to this test, deleted
// when it ends.
func (b *broker) names(t *testing.T) (exchange, queue string) {
	t.Helper()
	buf := make([]byte, 8)
	_, _ = rand.Read(buf)
	exchange = "craig.test." + hex.EncodeToString(buf)
	queue = exchange + ".q"
	t.Cleanup(func() {
		ch, err := b.conn.Channel()
		if err != nil {
			t.Errorf("cleanup channel: %v", err)
			return
		}
		defer func() { _ = ch.Close() }()
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", queue, err)
		}
		if err := ch.ExchangeDelete(exchange, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", exchange, err)
		}
	})
	return exchange, queue
}

// channel opens an admin channel; a failed passive declaration closes a
// channel, so helpers take a fresh one per operation.
func (b *broker) channel(t *testing.T) *amqp.Channel {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// bind declares exchange (as the kernel does) and a durable queue with args,
// bound with keys.
func (b *broker) bind(t *testing.T, exchange, queue string, args amqp.Table, keys ...string) {
	t.Helper()
	ch := b.channel(t)
	require.NoError(t, ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	_, err := ch.QueueDeclare(queue, true, false, false, false, args)
	require.NoError(t, err)
	for _, k := range keys {
		require.NoError(t, ch.QueueBind(queue, k, exchange, false, nil))
	}
}

// queue reports the queue's counters; ok is false when it does not exist.
func (b *broker) queue(name string) (q amqp.Queue, ok bool, err error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return amqp.Queue{}, false, err
	}
	defer func() { _ = ch.Close() }()
	q, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return amqp.Queue{}, false, nil
	}
	return q, err == nil, err
}

// waitConsumers waits until queue exists and has n consumers.
func (b *broker) waitConsumers(t *testing.T, queue string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		q, ok, err := b.queue(queue)
		return err == nil && ok && q.Consumers == n
	}, waitLimit, pollEvery, "queue %s never had %d consumer(s)", queue, n)
}

// ready returns the number of messages ready in queue.
func (b *broker) ready(t *testing.T, queue string) int {
	t.Helper()
	q, ok, err := b.queue(queue)
	require.NoError(t, err)
	require.True(t, ok, "queue %s does not exist", queue)
	return q.Messages
}

// get takes the next message off queue, if any.
func (b *broker) get(t *testing.T, queue string) (amqp.Delivery, bool) {
	t.Helper()
	d, ok, err := b.channel(t).Get(queue, true)
	require.NoError(t, err)
	return d, ok
}

// publishRaw publishes body as-is and waits for the broker's confirm, so
// its order relative to later publishes from other connections is fixed.
func (b *broker) publishRaw(t *testing.T, exchange, key string, body []byte) {
	t.Helper()
	ch := b.channel(t)
	require.NoError(t, ch.Confirm(false))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, amqp.Publishing{Body: body})
	require.NoError(t, err)
	acked, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, acked)
}

func newPublisher(t *testing.T, b *broker, exchange string) *rabbitmq.Publisher {
	t.Helper()
	_, logger := newLogRecorder()
	p, err := rabbitmq.NewPublisher(context.Background(), b.url, exchange, logger)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func newMessage(eventType string) outbox.Message {
	return outbox.Message{
		ID:        uuid.Must(uuid.NewV7()),
		EventType: eventType,
		Payload:   json.RawMessage(`{"case":"c-17","n":3}`),
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
}

// runningConsumer is a Consume call running in the background.
type runningConsumer struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startConsumer runs c.Consume until the test ends (or stop), and returns
// once the broker shows the consumer on the queue.
func startConsumer(t *testing.T, b *broker, c *rabbitmq.Consumer, exchange, queue string, keys []string, handle rabbitmq.HandleFunc) *runningConsumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningConsumer{cancel: cancel, done: make(chan error, 1)}
	go func() { rc.done <- c.Consume(ctx, b.url, exchange, queue, keys, handle) }()
	t.Cleanup(func() { _ = rc.stop() })
	b.waitConsumers(t, queue, 1)
	return rc
}

// stop cancels the consumer and waits for Consume to return; its result.
func (rc *runningConsumer) stop() error {
	rc.once.Do(func() {
		rc.cancel()
		select {
		case rc.err = <-rc.done:
		case <-time.After(waitLimit):
			rc.err = errors.New("Consume did not return after cancel")
		}
	})
	return rc.err
}

// receive waits for the next message on ch.
func receive(t *testing.T, ch <-chan outbox.Message) outbox.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(waitLimit):
		t.Fatal("no message handled within the deadline")
		return outbox.Message{}
	}
}

// logRecorder is kerneltest.LogRecorder that also signals each ERROR on
// errors.
type logRecorder struct {
	*kerneltest.LogRecorder
	errors chan slog.Record
}

func newLogRecorder() (*logRecorder, *slog.Logger) {
	r := &logRecorder{LogRecorder: &kerneltest.LogRecorder{}, errors: make(chan slog.Record, 100)}
	r.SetHook(func(rec slog.Record) {
		if rec.Level >= slog.LevelError {
			select {
			case r.errors <- rec.Clone():
			default:
			}
		}
	})
	return r, slog.New(r)
}

// at returns the messages logged at level.
func (r *logRecorder) at(level slog.Level) []string { return r.Messages(level, level) }
