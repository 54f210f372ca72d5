package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
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

// Delivery is one received message with what the transport knows of it.
type Delivery struct {
	// Message is the decoded body.
	Message outbox.Message
	// Body is the body as received (what a signature covers).
	Body []byte
	// RoutingKey is the key it was published with (kept across retries).
	RoutingKey string
	// Headers are the AMQP headers (eventsig's among them).
	Headers map[string]any
	// Attempt counts deliveries to a handler: 1 the first time.
	Attempt int
	// LastError is the previous attempt's error ("" on the first).
	LastError string
}

// DeliveryFunc handles one delivery; its result settles it like
// HandleFunc's.
type DeliveryFunc func(ctx context.Context, d Delivery) error

// Retry headers: a message a handler failed is republished to its queue
// carrying its attempt count, the last error and its original routing key
// (the republish goes through the default exchange, by queue name).
const (
	HeaderAttempt    = "x-craig-attempt"
	HeaderLastError  = "x-craig-last-error"
	HeaderRoutingKey = "x-craig-routing-key"
	// maxErrorHeader bounds the error text a retried message carries.
	maxErrorHeader = 1024
	// republishTimeout bounds a retry's publish and confirm (the broker is
	// local; a longer wait holds the consumer's only handler).
	republishTimeout = 10 * time.Second
)

// Consumer receives outbox messages from a durable queue with manual
// acknowledgements. The zero value is ready to use.
type Consumer struct {
	// Logger receives an ERROR per undecodable message and a WARN per failed
	// handle or lost session; nil means slog.Default().
	Logger *slog.Logger
	// Prefetch is the most unacknowledged deliveries in flight; 0 means
	// DefaultPrefetch.
	Prefetch int
	// MaxAttempts bounds the deliveries of a message whose handler fails:
	// after each failure it is republished to the queue with its attempt
	// count (at-least-once: the broker confirms the copy before the
	// original is acknowledged), and after the MaxAttempts-th it is
	// published to DeadLetterExchange instead. 0 requeues forever.
	MaxAttempts int
	// DeadLetterExchange receives messages that failed MaxAttempts times,
	// with their original routing key and the last error as a header; it
	// is declared as a durable topic exchange. Required with MaxAttempts.
	DeadLetterExchange string
	// DeadLetterQueue is declared (durable) and bound to DeadLetterExchange
	// for every routing key, so a dead-lettered message always has a queue
	// to land in. Required with MaxAttempts.
	DeadLetterQueue string
	// Concurrency is how many deliveries are handled at once (each handler
	// call on its own goroutine; the order between them is not kept, which
	// an inbox-deduplicated handler does not need); 0 or 1 handles one at a
	// time. Prefetch is raised to at least 2 × Concurrency.
	Concurrency int
	// RetryDelay is waited after a failed handle before the message is
	// retried or requeued (so a database outage does not spin); 0 retries
	// at once.
	RetryDelay time.Duration
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
	if handle == nil {
		return fmt.Errorf("%w: exchange, queue, at least one binding key and a handler are required", ErrInvalidConsumer)
	}
	return c.ConsumeDeliveries(ctx, url, exchange, queue, bindingKeys, func(ctx context.Context, d Delivery) error {
		return handle(ctx, d.Message)
	})
}

// ConsumeDeliveries is Consume with a handler that sees the whole delivery
// (body, headers, attempt).
func (c *Consumer) ConsumeDeliveries(ctx context.Context, url, exchange, queue string, bindingKeys []string, handle DeliveryFunc) error {
	if exchange == "" || queue == "" || len(bindingKeys) == 0 || handle == nil {
		return fmt.Errorf("%w: exchange, queue, at least one binding key and a handler are required", ErrInvalidConsumer)
	}
	if c.MaxAttempts < 0 || (c.MaxAttempts > 0 && (c.DeadLetterExchange == "" || c.DeadLetterQueue == "")) || c.RetryDelay < 0 {
		return fmt.Errorf("%w: max attempts %d needs a dead-letter exchange and queue (and a retry delay >= 0)", ErrInvalidConsumer, c.MaxAttempts)
	}
	prefetch := c.Prefetch
	if prefetch == 0 {
		prefetch = max(DefaultPrefetch, 2*c.Concurrency)
	}
	if prefetch < 0 || prefetch > math.MaxUint16 {
		return fmt.Errorf("%w: prefetch %d outside 0..%d", ErrInvalidConsumer, prefetch, math.MaxUint16)
	}
	log := c.logger().With(slog.String("exchange", exchange), slog.String("queue", queue))
	open := func() (*session, error) {
		return openSession(ctx, url, exchange, queue, bindingKeys, prefetch, c.deadLetter())
	}
	sess, err := open()
	if err != nil {
		return err
	}
	for {
		err := sess.serve(ctx, log, dispatcher{handle: handle, queue: queue, maxAttempts: c.MaxAttempts, deadLetter: c.DeadLetterExchange, retryDelay: c.RetryDelay}, max(c.Concurrency, 1))
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

// deadLetter is the dead-letter exchange and queue, when attempts are
// bounded.
func (c *Consumer) deadLetter() deadLetter {
	if c.MaxAttempts == 0 {
		return deadLetter{}
	}
	return deadLetter{exchange: c.DeadLetterExchange, queue: c.DeadLetterQueue}
}

// deadLetter names where messages go after their last attempt.
type deadLetter struct{ exchange, queue string }

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
	// retry is a confirm-mode channel for republishing failed messages
	// (nil unless the consumer bounds attempts).
	retry     *amqp.Channel
	closed    chan *amqp.Error // the channel's close reason, if the broker closed it
	cancelled chan string      // the consumer tag, if the broker cancelled it
}

func openSession(ctx context.Context, url, exchange, queue string, bindingKeys []string, prefetch int, dl deadLetter) (*session, error) {
	conn, err := dial(ctx, url)
	if err != nil {
		return nil, err
	}
	s, err := setUp(ctx, conn, exchange, queue, bindingKeys, prefetch)
	if err == nil && dl.exchange != "" {
		s.retry, err = retryChannel(conn, dl)
	}
	if err != nil {
		_ = closeConn(conn)
		return nil, err
	}
	return s, nil
}

// retryChannel opens the confirm-mode channel failed messages are
// republished on and declares the dead-letter exchange and its queue.
func retryChannel(conn *amqp.Connection, dl deadLetter) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open retry channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("rabbitmq: retry channel confirm mode: %w", err)
	}
	if err := declareExchange(ch, dl.exchange); err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(dl.queue, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("rabbitmq: declare dead-letter queue %q: %w", dl.queue, err)
	}
	if err := ch.QueueBind(dl.queue, "#", dl.exchange, false, nil); err != nil {
		return nil, fmt.Errorf("rabbitmq: bind dead-letter queue %q: %w", dl.queue, err)
	}
	return ch, nil
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

// serve handles deliveries on workers goroutines until ctx is cancelled
// (nil) or the session ends (an error wrapping errSessionLost); it returns
// once every handler it started has returned.
func (s *session) serve(ctx context.Context, log *slog.Logger, disp dispatcher, workers int) error {
	work := make(chan amqp.Delivery)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for d := range work {
				disp.deliver(ctx, log, s, d)
			}
		})
	}
	defer func() {
		close(work)
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-s.deliveries:
			if !ok {
				return s.lost()
			}
			select {
			case work <- d:
			case <-ctx.Done():
				_ = d.Nack(false, true)
				return nil
			}
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

// dispatcher hands deliveries to the handler and settles them.
type dispatcher struct {
	handle      DeliveryFunc
	queue       string
	maxAttempts int
	deadLetter  string
	retryDelay  time.Duration
}

// deliver decodes, handles and settles one delivery.
func (p dispatcher) deliver(ctx context.Context, log *slog.Logger, s *session, d amqp.Delivery) {
	dv := delivery(d)
	attrs := []any{slog.String("message_id", d.MessageId), slog.String("routing_key", dv.RoutingKey), slog.Int("attempt", dv.Attempt)}
	m, err := outbox.DecodeMessage(d.Body)
	if err != nil {
		log.ErrorContext(ctx, "rabbitmq message does not decode; rejected without requeue",
			append(attrs, slog.Int("body_bytes", len(d.Body)), slog.Any("error", err))...)
		if err := d.Nack(false, false); err != nil {
			log.WarnContext(ctx, "rabbitmq reject failed", append(attrs, slog.Any("error", err))...)
		}
		return
	}
	dv.Message = m
	herr := p.handle(ctx, dv)
	if herr == nil {
		if err := d.Ack(false); err != nil {
			// The message will be delivered again; the inbox makes that harmless.
			log.WarnContext(ctx, "rabbitmq ack failed; the message will be redelivered", append(attrs, slog.Any("error", err))...)
		}
		return
	}
	if ctx.Err() != nil && errors.Is(herr, context.Canceled) {
		log.DebugContext(ctx, "rabbitmq handler cancelled; message requeued", attrs...)
		_ = d.Nack(false, true) // the broker requeues a closed channel's deliveries anyway
		return
	}
	p.retry(ctx, log, s, d, dv, herr, attrs)
}

// retry settles a delivery whose handler failed: after the retry delay it
// is requeued (unbounded attempts), republished with attempt+1, or, at the
// last attempt, dead-lettered; the original is acknowledged only after the
// broker confirmed the copy.
func (p dispatcher) retry(ctx context.Context, log *slog.Logger, s *session, d amqp.Delivery, dv Delivery, herr error, attrs []any) {
	if p.retryDelay > 0 {
		t := time.NewTimer(p.retryDelay)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if p.maxAttempts == 0 || s.retry == nil || ctx.Err() != nil {
		log.WarnContext(ctx, "rabbitmq handler failed; message requeued", append(attrs, slog.Any("error", herr))...)
		if err := d.Nack(false, true); err != nil {
			// The channel is gone; the broker requeues unacknowledged
			// deliveries of a closed channel anyway.
			log.WarnContext(ctx, "rabbitmq requeue failed", append(attrs, slog.Any("error", err))...)
		}
		return
	}
	exchange, key, what := "", p.queue, "retried"
	if dv.Attempt >= p.maxAttempts {
		exchange, key, what = p.deadLetter, dv.RoutingKey, "dead-lettered"
	}
	// The copy's publish and confirm finish even when ctx ends meanwhile
	// (shutdown): requeueing the original after the broker took the copy
	// would deliver the message twice.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), republishTimeout)
	defer cancel()
	err := republish(pctx, s.retry, exchange, key, d, dv, herr)
	if err != nil {
		log.WarnContext(ctx, "rabbitmq handler failed and the retry could not be published; message requeued",
			append(attrs, slog.Any("error", herr), slog.Any("publish_error", err))...)
		_ = d.Nack(false, true)
		return
	}
	log.WarnContext(ctx, "rabbitmq handler failed; message "+what, append(attrs, slog.Int("max_attempts", p.maxAttempts), slog.Any("error", herr))...)
	if err := d.Ack(false); err != nil {
		log.WarnContext(ctx, "rabbitmq ack failed; the message will be redelivered", append(attrs, slog.Any("error", err))...)
	}
}

// delivery reads the transport's facts of d (attempt and routing key from
// the retry headers when it is a retried copy).
func delivery(d amqp.Delivery) Delivery {
	dv := Delivery{Body: d.Body, RoutingKey: d.RoutingKey, Headers: map[string]any(d.Headers), Attempt: 1}
	if dv.Headers == nil {
		dv.Headers = map[string]any{}
	}
	switch n := dv.Headers[HeaderAttempt].(type) {
	case int32:
		dv.Attempt = max(int(n), 1)
	case int64:
		dv.Attempt = max(int(n), 1)
	}
	if k, ok := dv.Headers[HeaderRoutingKey].(string); ok && k != "" {
		dv.RoutingKey = k
	}
	dv.LastError, _ = dv.Headers[HeaderLastError].(string)
	return dv
}

// republish publishes a copy of d with the retry headers and waits for the
// broker's confirm.
func republish(ctx context.Context, ch *amqp.Channel, exchange, key string, d amqp.Delivery, dv Delivery, herr error) error {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	msg := herr.Error()
	if len(msg) > maxErrorHeader {
		msg = msg[:maxErrorHeader]
	}
	headers[HeaderAttempt] = int32(dv.Attempt + 1)
	headers[HeaderLastError] = msg
	headers[HeaderRoutingKey] = dv.RoutingKey
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, DeliveryMode: amqp.Persistent,
		MessageId: d.MessageId, Type: d.Type, Timestamp: d.Timestamp, Body: d.Body,
	})
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return err
	case !ok:
		return ErrNacked
	}
	return nil
}
