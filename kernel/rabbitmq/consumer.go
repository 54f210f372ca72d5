package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/craig/retention/kernel/outbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	// DefaultPrefetch is how many unacknowledged deliveries the broker sends
	// ahead. Handlers run one at a time, so a few in flight hide the network
	// round trip; more would only let one consumer hoard messages its
	// siblings on the same queue could be handling.
	DefaultPrefetch = 10

	// minReconnectDelay and maxReconnectDelay bound the backoff between
	// attempts to re-establish a lost consumer session: quick enough to ride
	// out a broker restart, slow enough not to hammer a broker that is down.
	minReconnectDelay = time.Second
	maxReconnectDelay = 30 * time.Second
)

// ErrInvalidConsumer is returned (wrapped) by Consume for arguments it
// cannot run with.
var ErrInvalidConsumer = errors.New("rabbitmq: invalid consumer")

// errSessionLost ends a consumer session that the broker or the network
// closed; Consume reconnects.
var errSessionLost = errors.New("rabbitmq: consumer session lost")

// HandleFunc handles one decoded message. nil means done (the delivery is
// acknowledged); an error means "try again" (it is requeued).
type HandleFunc func(ctx context.Context, m outbox.Message) error

// Consumer receives outbox messages from a durable queue with manual
// acknowledgements. The zero value is ready to use.
type Consumer struct {
	// Logger receives an ERROR per undecodable message and a WARN per failed
	// handle or lost session; nil means slog.Default().
	Logger *slog.Logger
	// Prefetch is the most unacknowledged deliveries in flight; 0 means
	// DefaultPrefetch.
	Prefetch int
}

// Consume declares exchange (a durable topic exchange) and queue (durable),
// binds the queue to every binding key, and hands each delivery to handle,
// one at a time, until ctx is cancelled; then it returns nil.
//
//   - handle returns nil: the delivery is acknowledged.
//   - handle returns an error: it is nacked and requeued (WARN), so it is
//     delivered again; wrap handle with inbox.MessageHandler so a delivery
//     that was handled before is acknowledged without running again.
//   - the body does not decode (outbox.DecodeMessage): it is nacked WITHOUT
//     requeue (ERROR), since no retry can fix it; it goes to the queue's
//     dead-letter exchange if a broker policy sets one, else it is dropped.
//
// The first connection is made before Consume returns an error, so a wrong
// URL or a refused declaration fails fast. A session lost later (broker
// restart, queue deleted) is re-established with backoff; unacknowledged
// deliveries of the lost session are redelivered by the broker.
func (c *Consumer) Consume(ctx context.Context, url, exchange, queue string, bindingKeys []string, handle HandleFunc) error {
	if exchange == "" || queue == "" || len(bindingKeys) == 0 || handle == nil {
		return fmt.Errorf("%w: exchange, queue, at least one binding key and a handler are required", ErrInvalidConsumer)
	}
	prefetch := c.Prefetch
	if prefetch == 0 {
		prefetch = DefaultPrefetch
	}
	if prefetch < 0 || prefetch > math.MaxUint16 {
		return fmt.Errorf("%w: prefetch %d outside 0..%d", ErrInvalidConsumer, prefetch, math.MaxUint16)
	}
	log := c.logger().With(slog.String("exchange", exchange), slog.String("queue", queue))
	open := func() (*session, error) {
		return openSession(ctx, url, exchange, queue, bindingKeys, prefetch)
	}
	sess, err := open()
	if err != nil {
		return err
	}
	for {
		err := sess.serve(ctx, log, handle)
		sess.close()
		if ctx.Err() != nil {
			return nil
		}
		log.WarnContext(ctx, "rabbitmq consumer lost its session; reconnecting", slog.Any("error", err))
		if sess = reconnect(ctx, log, open); sess == nil {
			return nil // cancelled while reconnecting
		}
	}
}

// reconnect retries open with exponential backoff until it succeeds (the
// session) or ctx is cancelled (nil).
func reconnect(ctx context.Context, log *slog.Logger, open func() (*session, error)) *session {
	delay := minReconnectDelay
	for {
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		sess, err := open()
		if err == nil {
			log.InfoContext(ctx, "rabbitmq consumer reconnected")
			return sess
		}
		if ctx.Err() != nil {
			return nil
		}
		log.WarnContext(ctx, "rabbitmq consumer reconnect failed", slog.Duration("retry_in", delay), slog.Any("error", err))
		delay = min(2*delay, maxReconnectDelay)
	}
}

func (c *Consumer) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// session is one connection consuming one queue.
type session struct {
	conn       *amqp.Connection
	deliveries <-chan amqp.Delivery
	closed     chan *amqp.Error // the channel's close reason, if the broker closed it
	cancelled  chan string      // the consumer tag, if the broker cancelled it
}

func openSession(ctx context.Context, url, exchange, queue string, bindingKeys []string, prefetch int) (*session, error) {
	conn, err := dial(ctx, url)
	if err != nil {
		return nil, err
	}
	s, err := setUp(ctx, conn, exchange, queue, bindingKeys, prefetch)
	if err != nil {
		_ = closeConn(conn)
		return nil, err
	}
	return s, nil
}

func setUp(ctx context.Context, conn *amqp.Connection, exchange, queue string, bindingKeys []string, prefetch int) (*session, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("rabbitmq: qos %d: %w", prefetch, err)
	}
	if err := declareExchange(ch, exchange); err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("rabbitmq: declare queue %q: %w", queue, err)
	}
	for _, key := range bindingKeys {
		if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
			return nil, fmt.Errorf("rabbitmq: bind queue %q to %q with %q: %w", queue, exchange, key, err)
		}
	}
	s := &session{
		conn:      conn,
		closed:    ch.NotifyClose(make(chan *amqp.Error, 1)),
		cancelled: ch.NotifyCancel(make(chan string, 1)),
	}
	// The library picks a unique consumer tag and cancels the consumer when
	// ctx ends.
	if s.deliveries, err = ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("rabbitmq: consume %q: %w", queue, err)
	}
	return s, nil
}

// serve handles deliveries until ctx is cancelled (nil) or the session ends
// (an error wrapping errSessionLost).
func (s *session) serve(ctx context.Context, log *slog.Logger, handle HandleFunc) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-s.deliveries:
			if !ok {
				return s.lost()
			}
			deliver(ctx, log, d, handle)
		}
	}
}

// lost describes why the delivery stream ended.
func (s *session) lost() error {
	select {
	case tag := <-s.cancelled:
		return fmt.Errorf("%w: the broker cancelled consumer %s (queue deleted?)", errSessionLost, tag)
	case e := <-s.closed:
		if e != nil {
			return fmt.Errorf("%w: %w", errSessionLost, e)
		}
	default:
	}
	return errSessionLost
}

func (s *session) close() { _ = closeConn(s.conn) }

// deliver decodes, handles and settles one delivery.
func deliver(ctx context.Context, log *slog.Logger, d amqp.Delivery, handle HandleFunc) {
	attrs := []any{slog.String("message_id", d.MessageId), slog.String("routing_key", d.RoutingKey)}
	m, err := outbox.DecodeMessage(d.Body)
	if err != nil {
		log.ErrorContext(ctx, "rabbitmq message does not decode; rejected without requeue",
			append(attrs, slog.Int("body_bytes", len(d.Body)), slog.Any("error", err))...)
		if err := d.Nack(false, false); err != nil {
			log.WarnContext(ctx, "rabbitmq reject failed", append(attrs, slog.Any("error", err))...)
		}
		return
	}
	if herr := handle(ctx, m); herr != nil {
		if ctx.Err() != nil && errors.Is(herr, context.Canceled) {
			log.DebugContext(ctx, "rabbitmq handler cancelled; message requeued", attrs...)
		} else {
			log.WarnContext(ctx, "rabbitmq handler failed; message requeued", append(attrs, slog.Any("error", herr))...)
		}
		if err := d.Nack(false, true); err != nil {
			// The channel is gone; the broker requeues unacknowledged
			// deliveries of a closed channel anyway.
			log.WarnContext(ctx, "rabbitmq requeue failed", append(attrs, slog.Any("error", err))...)
		}
		return
	}
	if err := d.Ack(false); err != nil {
		// The message will be delivered again; the inbox makes that harmless.
		log.WarnContext(ctx, "rabbitmq ack failed; the message will be redelivered", append(attrs, slog.Any("error", err))...)
	}
}
