// Package rabbitmq carries outbox messages over RabbitMQ (AMQP 0-9-1): a
// Publisher for the outbox Drainer, with publisher confirms, and a Consumer
// with manual acknowledgements for the receiving side (wrap its handler with
// inbox.MessageHandler to deduplicate).
//
// Events go to one durable topic exchange; the routing key is the event type
// and the AMQP message id is the outbox id.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/craig/retention/kernel/settings"
	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	// dialTimeout bounds the TCP connect plus the AMQP handshake. The broker
	// is local or in the same network; ten seconds is generous, and a drain
	// blocked on a dial holds its claimed rows for that long.
	dialTimeout = 10 * time.Second

	// heartbeat is the AMQP heartbeat interval: a dead peer is noticed
	// within about two intervals (the library's own default for Dial).
	heartbeat = 10 * time.Second

	// closeTimeout bounds the close handshake, so shutting down never hangs
	// on a broker that stopped answering; the socket is closed regardless.
	closeTimeout = 5 * time.Second

	// contentType is the content type of every message body.
	contentType = "application/json"
)

// dial connects to url. ctx cancels the TCP connect; the handshake is
// bounded by a socket deadline of dialTimeout (or ctx's deadline, if sooner),
// which the library clears once the connection is open.
func dial(ctx context.Context, url string) (*amqp.Connection, error) {
	cfg := amqp.Config{
		Heartbeat: heartbeat,
		Dial: func(network, addr string) (net.Conn, error) {
			deadline := time.Now().Add(dialTimeout)
			if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
				deadline = d
			}
			dialer := net.Dialer{Deadline: deadline}
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		},
	}
	conn, err := amqp.DialConfig(url, cfg)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: dial %s: %w", settings.Redact(url), err)
	}
	return conn, nil
}

// declareExchange declares the durable topic exchange events go through.
// Publisher and Consumer both declare it (idempotently), so neither depends
// on the other starting first.
func declareExchange(ch *amqp.Channel, exchange string) error {
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %q: %w", exchange, err)
	}
	return nil
}

// closeConn closes conn (and with it its channels); a connection that is
// already closed is not an error.
func closeConn(conn *amqp.Connection) error {
	if conn == nil {
		return nil
	}
	if err := conn.CloseDeadline(time.Now().Add(closeTimeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("rabbitmq: close connection: %w", err)
	}
	return nil
}
