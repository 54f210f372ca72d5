package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/outbox"
	amqp "github.com/rabbitmq/amqp091-go"
)

// MaxBodyBytes is the largest message body Publish sends. RabbitMQ 4.x
// refuses messages over 16 MiB by default (max_message_size; 3.x allowed
// 128 MiB) by closing the channel, which would make the row fail on every
// drain forever; refusing it here as malformed stamps it once, with the
// reason. Outbox events are small; one near this size is a bug.
const MaxBodyBytes = 16 << 20

var (
	// ErrNacked is returned (wrapped) when the broker refused a message
	// (basic.nack): a queue overflowing with reject-publish, an internal
	// broker error. The message may be accepted on a later attempt.
	ErrNacked = errors.New("rabbitmq: broker nacked the message")
	// ErrPublisherClosed is returned by Publish after Close.
	ErrPublisherClosed = errors.New("rabbitmq: publisher closed")
	// ErrBlocked is returned (wrapped, with outbox.ErrUnavailable) while
	// the broker has blocked the connection (a memory or disk alarm): a
	// publish would stall in the socket write where no context can
	// interrupt it. It says nothing about the message, so the drain counts
	// no attempt against it.
	ErrBlocked = errors.New("rabbitmq: connection blocked by the broker")
	// ErrUnroutable is returned (wrapped) by a mandatory publisher
	// (Mandatory) when the broker returned the message: no queue is bound
	// for its routing key. The drain counts it as a failed attempt.
	ErrUnroutable = errors.New("rabbitmq: the broker returned the message: no queue is bound for its routing key")
)

// Publisher publishes outbox messages to a topic exchange with publisher
// confirms. It implements outbox.Publisher and is safe for concurrent use;
// publishes are serialised on one channel.
type Publisher struct {
	url      string
	exchange string
	logger   *slog.Logger

	mu     sync.Mutex // guards everything below; held across a publish and its confirm
	closed bool
	conn   *amqp.Connection
	ch     *amqp.Channel
	// blocked holds the broker's reason while the current connection is
	// blocked, nil otherwise. Each connection gets its own, so the watcher
	// of a dead connection cannot clear the state of its successor.
	blocked *atomic.Pointer[string]
	// chClosed receives the reason the broker closed the channel, if it did.
	chClosed chan *amqp.Error
	// nextDial is the earliest time a reconnect is attempted after a failed
	// one; backoff is the current wait (0 while connected).
	nextDial time.Time
	backoff  time.Duration
	// now is the clock (time.Now; tests script it).
	now func() time.Time
	// signer signs every body (nil: unsigned); set before the first publish.
	signer *eventsig.Signer
	// mandatory publishes with the mandatory flag; returned receives the
	// current channel's returned messages.
	mandatory bool
	returned  chan amqp.Return
}

// Mandatory makes every later Publish set the mandatory flag: a message no
// queue is bound for is returned by the broker and Publish fails with
// ErrUnroutable, instead of the broker confirming and dropping it
// (outbox.mandatory). Call it before publishing.
func (p *Publisher) Mandatory(on bool) *Publisher {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mandatory = on
	return p
}

// SignWith makes every later Publish sign its body with s (the
// eventsig headers); nil publishes unsigned. Call it before publishing.
func (p *Publisher) SignWith(s *eventsig.Signer) *Publisher {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signer = s
	return p
}

// Reconnect backoff of a publisher whose broker is unreachable: the first
// retry after a second, doubling to at most 30 s, each with up to 20%
// jitter so replicas do not reconnect in step. A publish between retries
// fails at once with outbox.ErrUnavailable instead of dialling.
const (
	minReconnectBackoff = time.Second
	maxReconnectBackoff = 30 * time.Second
)

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher connects to url, declares exchange as a durable topic
// exchange and puts a channel in confirm mode. It fails when the broker is
// unreachable, so a misconfigured URL is found at startup; later connection
// losses are repaired by the next Publish. A nil logger means slog.Default().
func NewPublisher(ctx context.Context, url, exchange string, logger *slog.Logger) (*Publisher, error) {
	p, err := newPublisher(url, exchange, logger)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connectLocked(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func newPublisher(url, exchange string, logger *slog.Logger) (*Publisher, error) {
	if exchange == "" {
		return nil, errors.New("rabbitmq: publisher needs an exchange name (the default exchange cannot route by topic)")
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Publisher{url: url, exchange: exchange, logger: logger, now: time.Now}, nil
}

// NewLazyPublisher is NewPublisher for a process that must run while the
// broker is down (serve keeps sweeping and exporting metrics through a
// broker outage): it tries to connect once, and when that fails it logs a
// WARN and returns a publisher that reconnects with backoff (1 s doubling to
// 30 s, jittered) from its Publish calls. Between retries Publish fails at
// once with an error wrapping outbox.ErrUnavailable.
func NewLazyPublisher(ctx context.Context, url, exchange string, logger *slog.Logger) (*Publisher, error) {
	p, err := newPublisher(url, exchange, logger)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connectLocked(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		p.scheduleRetryLocked(ctx, err)
	}
	return p, nil
}

// Connected reports whether the publisher holds an open connection and
// channel (readiness: a disconnected publisher cannot deliver events).
func (p *Publisher) Connected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && p.ch != nil && !p.ch.IsClosed() && p.conn != nil && !p.conn.IsClosed()
}

// EnsureConnected reconnects a disconnected publisher when its backoff
// allows, so readiness recovers once the broker is back even when no event
// is pending (Publish reconnects too). It returns nil when connected, an
// error wrapping outbox.ErrUnavailable otherwise.
func (p *Publisher) EnsureConnected(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ensureLocked(ctx)
}

// ensureLocked connects when disconnected and the backoff allows.
func (p *Publisher) ensureLocked(ctx context.Context) error {
	if p.closed {
		return ErrPublisherClosed
	}
	if p.ch != nil && !p.ch.IsClosed() && p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	if now := p.now(); now.Before(p.nextDial) {
		return fmt.Errorf("%w: next reconnect in %v", outbox.ErrUnavailable, p.nextDial.Sub(now).Round(time.Millisecond))
	}
	if err := p.connectLocked(ctx); err != nil {
		if ctx.Err() == nil {
			p.scheduleRetryLocked(ctx, err)
		}
		return fmt.Errorf("reconnect: %w: %w", outbox.ErrUnavailable, err)
	}
	p.backoff, p.nextDial = 0, time.Time{}
	p.logger.InfoContext(ctx, "rabbitmq publisher reconnected", slog.String("exchange", p.exchange))
	return nil
}

// scheduleRetryLocked records a failed connect: the next attempt waits the
// doubled backoff (with jitter), and the outage is logged once per attempt.
func (p *Publisher) scheduleRetryLocked(ctx context.Context, err error) {
	p.backoff = min(max(2*p.backoff, minReconnectBackoff), maxReconnectBackoff)
	wait := p.backoff + time.Duration(rand.Int64N(int64(p.backoff)/5+1))
	p.nextDial = p.now().Add(wait)
	p.logger.WarnContext(ctx, "rabbitmq publisher cannot reach the broker; events stay pending and are published after it reconnects",
		slog.String("exchange", p.exchange), slog.Duration("retry_in", wait), slog.Any("error", err))
}

// Publish sends m with routing key m.EventType, message id m.ID, persistent
// delivery and content type application/json, and waits for the broker's
// confirm (or ctx). It returns nil only once the broker confirmed.
//
// A message with an invalid routing key, an invalid payload or a body over
// MaxBodyBytes is refused without contacting the broker, with an error
// wrapping outbox.ErrMalformed. A nack wraps ErrNacked. If the connection or
// channel has closed since the last call, Publish reconnects first.
//
// Messages are published without the mandatory flag unless Mandatory was
// set: an event no queue is bound for is then confirmed and dropped, as a
// topic exchange does for events nobody subscribes to. With it, such an
// event fails with ErrUnroutable.
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	body, err := outbox.EncodeMessage(m) // validates the routing key too
	if err != nil {
		return fmt.Errorf("rabbitmq publish: %w", err)
	}
	if len(body) > MaxBodyBytes {
		return fmt.Errorf("rabbitmq publish %s: %w: body is %d bytes, the limit is %d", m.ID, outbox.ErrMalformed, len(body), MaxBodyBytes)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rabbitmq publish %s: %w", m.ID, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrPublisherClosed
	}
	if err := p.ensureLocked(ctx); err != nil {
		return fmt.Errorf("rabbitmq publish %s: %w", m.ID, err)
	}
	if reason := p.blocked.Load(); reason != nil {
		return fmt.Errorf("rabbitmq publish %s: %w: %w: %s", m.ID, outbox.ErrUnavailable, ErrBlocked, *reason)
	}
	var headers amqp.Table
	if p.signer != nil {
		headers = p.signer.Headers(body)
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, m.EventType, p.mandatory, false, amqp.Publishing{
		Headers:      headers,
		ContentType:  contentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID.String(),
		Type:         m.EventType,
		Timestamp:    m.CreatedAt,
		Body:         body,
	})
	if err != nil {
		if ctx.Err() == nil {
			_ = p.dropLocked() // a write failed: reconnect on the next call
		}
		return fmt.Errorf("rabbitmq publish %s: %w", m.ID, err)
	}
	if dc == nil {
		return fmt.Errorf("rabbitmq publish %s: channel is not in confirm mode", m.ID)
	}
	return p.confirmLocked(ctx, m, dc)
}

// confirmLocked waits for the broker's confirm of one publish.
func (p *Publisher) confirmLocked(ctx context.Context, m outbox.Message, dc *amqp.DeferredConfirmation) error {
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("rabbitmq publish %s: waiting for the broker's confirm: %w", m.ID, err)
	case acked:
		return p.returnedLocked(m)
	case p.ch.IsClosed():
		// The channel died before the confirm (the library then settles
		// outstanding confirmations as not acked), e.g. the exchange was
		// deleted. The reason is notified before the confirmations settle.
		reason := "no reason given"
		select {
		case e := <-p.chClosed:
			if e != nil {
				reason = e.Error()
			}
		default:
		}
		_ = p.dropLocked()
		return fmt.Errorf("rabbitmq publish %s: channel closed before the broker confirmed: %s", m.ID, reason)
	}
	return fmt.Errorf("rabbitmq publish %s: %w", m.ID, ErrNacked)
}

// returnedLocked is ErrUnroutable when the broker returned m. A return is
// sent before the confirm of the same publish, and publishes are serialised,
// so it is already queued once the confirm arrived; returns of earlier
// messages (none: each was read after its own confirm) are discarded.
func (p *Publisher) returnedLocked(m outbox.Message) error {
	for {
		select {
		case r, ok := <-p.returned:
			if !ok {
				return nil
			}
			if r.MessageId == m.ID.String() {
				return fmt.Errorf("rabbitmq publish %s: %w (exchange %q, routing key %q, %d %s)", m.ID, ErrUnroutable, r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
			}
		default:
			return nil
		}
	}
}

// Close closes the connection. Publish returns ErrPublisherClosed
// afterwards. A publish in progress completes (or fails) first.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.dropLocked()
}

func (p *Publisher) connectLocked(ctx context.Context) error {
	_ = p.dropLocked() // the old connection is dead or being replaced
	conn, err := dial(ctx, p.url)
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = closeConn(conn)
		return fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = closeConn(conn)
		return fmt.Errorf("rabbitmq: confirm mode: %w", err)
	}
	if err := declareExchange(ch, p.exchange); err != nil {
		_ = closeConn(conn)
		return err
	}
	blocked := &atomic.Pointer[string]{}
	notify := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func() {
		// Ends when the connection shuts down and the library closes notify.
		for b := range notify {
			if b.Active {
				reason := b.Reason
				blocked.Store(&reason)
			} else {
				blocked.Store(nil)
			}
		}
	}()
	p.conn, p.ch, p.blocked = conn, ch, blocked
	p.chClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
	// Buffered beyond the one publish in flight: the library's reader
	// must never block on a return nobody reads yet.
	p.returned = ch.NotifyReturn(make(chan amqp.Return, 16))
	return nil
}

func (p *Publisher) dropLocked() error {
	conn := p.conn
	p.conn, p.ch = nil, nil
	return closeConn(conn)
}
