package rabbitmq_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/rabbitmq"
)

// TestConsumerDeadLettersAfterMaxAttempts: a message whose handler keeps
// failing is handed over MaxAttempts times (attempt 1..N, each with the
// previous error), then lands in the dead-letter queue with its original
// routing key, body and the last error; a message that succeeds on its
// second attempt is not dead-lettered. Nothing is lost, nothing loops.
func TestConsumerDeadLettersAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	dlx, dlq := exchange+".dead", queue+".dead"
	t.Cleanup(func() {
		ch := b.channel(t)
		_, _ = ch.QueueDelete(dlq, false, false, false)
		_ = ch.ExchangeDelete(dlx, false, false)
	})
	p := newPublisher(t, b, exchange)
	poison, flaky := newMessage("rules.evaluated"), newMessage("rules.evaluated")

	var mu sync.Mutex
	seen := map[string][]rabbitmq.Delivery{}
	done := make(chan struct{})
	handle := func(_ context.Context, d rabbitmq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		id := d.Message.ID.String()
		seen[id] = append(seen[id], d)
		if id == flaky.ID.String() && d.Attempt == 2 {
			close(done)
			return nil
		}
		return fmt.Errorf("database down (attempt %d)", d.Attempt)
	}
	_, logger := newLogRecorder()
	c := &rabbitmq.Consumer{Logger: logger, MaxAttempts: 5, DeadLetterExchange: dlx, DeadLetterQueue: dlq, RetryDelay: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.ConsumeDeliveries(ctx, b.url, exchange, queue, []string{"#"}, handle) }()
	b.waitConsumers(t, queue, 1)
	require.NoError(t, p.Publish(ctx, poison))
	require.NoError(t, p.Publish(ctx, flaky))

	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("the flaky message was never retried")
	}
	require.Eventually(t, func() bool { return b.ready(t, dlq) == 1 }, waitLimit, 10*time.Millisecond, "the poison message is dead-lettered")
	cancel()
	require.NoError(t, <-errc)

	mu.Lock()
	defer mu.Unlock()
	attempts := seen[poison.ID.String()]
	require.Len(t, attempts, 5, "handed over exactly MaxAttempts times")
	for i, d := range attempts {
		require.Equal(t, i+1, d.Attempt)
		require.Equal(t, "rules.evaluated", d.RoutingKey, "the original routing key across retries")
		if i == 0 {
			require.Empty(t, d.LastError)
		} else {
			require.Equal(t, fmt.Sprintf("database down (attempt %d)", i), d.LastError)
		}
	}
	require.Len(t, seen[flaky.ID.String()], 2)

	dead, ok := b.get(t, dlq)
	require.True(t, ok)
	require.Equal(t, poison.ID.String(), dead.MessageId)
	require.Equal(t, "rules.evaluated", dead.RoutingKey)
	require.Equal(t, "database down (attempt 5)", dead.Headers[rabbitmq.HeaderLastError])
	// Nothing left to loop: the poison message is not in the queue (the
	// flaky one may be, requeued by the cancel if its ack had not gone out).
	for {
		left, ok := b.get(t, queue)
		if !ok {
			break
		}
		require.Equal(t, flaky.ID.String(), left.MessageId, "only an unacknowledged success can be requeued (left: attempt %v, redelivered %v)", left.Headers[rabbitmq.HeaderAttempt], left.Redelivered)
	}
	_, ok = b.get(t, dlq)
	require.False(t, ok, "only the poison message")
}

// TestSignedPublishVerifies: a publisher that signs puts the eventsig
// headers on every message, and they verify over the body as received.
func TestSignedPublishVerifies(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	priv, line, err := eventsig.GeneratePEM("rules-test", "craig-rules")
	require.NoError(t, err)
	path := t.TempDir() + "/k.pem"
	require.NoError(t, os.WriteFile(path, priv, 0o600))
	signer, err := eventsig.LoadSigner("rules-test", path)
	require.NoError(t, err)
	trust, err := eventsig.ParseTrust(strings.NewReader(line))
	require.NoError(t, err)
	p := newPublisher(t, b, exchange).SignWith(signer)

	got := make(chan rabbitmq.Delivery, 1)
	_, logger := newLogRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- (&rabbitmq.Consumer{Logger: logger}).ConsumeDeliveries(ctx, b.url, exchange, queue, []string{"#"}, func(_ context.Context, d rabbitmq.Delivery) error {
			got <- d
			return nil
		})
	}()
	b.waitConsumers(t, queue, 1)
	require.NoError(t, p.Publish(ctx, newMessage("rules.evaluations_archived")))
	var d rabbitmq.Delivery
	select {
	case d = <-got:
	case <-time.After(waitLimit):
		t.Fatal("no delivery")
	}
	id, err := trust.Verify(d.Body, d.Headers, "craig-rules")
	require.NoError(t, err)
	require.Equal(t, "rules-test", id)
	_, err = trust.Verify(append(d.Body, ' '), d.Headers, "craig-rules")
	require.ErrorIs(t, err, eventsig.ErrBadSignature)
	cancel()
	require.NoError(t, <-errc)
}

// TestConsumerConcurrency: with Concurrency 3, three deliveries are in the
// handler at once (each waits for the other two), and all are acknowledged.
func TestConsumerConcurrency(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	exchange, queue := b.names(t)
	p := newPublisher(t, b, exchange)
	var mu sync.Mutex
	inside, peak := 0, 0
	all := make(chan struct{})
	var once sync.Once
	handle := func(ctx context.Context, _ rabbitmq.Delivery) error {
		mu.Lock()
		inside++
		peak = max(peak, inside)
		if inside == 3 {
			once.Do(func() { close(all) })
		}
		mu.Unlock()
		select {
		case <-all:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		inside--
		mu.Unlock()
		return nil
	}
	_, logger := newLogRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- (&rabbitmq.Consumer{Logger: logger, Concurrency: 3}).ConsumeDeliveries(ctx, b.url, exchange, queue, []string{"#"}, handle)
	}()
	b.waitConsumers(t, queue, 1)
	for range 3 {
		require.NoError(t, p.Publish(ctx, newMessage("rules.evaluated")))
	}
	select {
	case <-all:
	case <-time.After(waitLimit):
		t.Fatal("the three deliveries were never in the handler together")
	}
	require.Eventually(t, func() bool { return b.ready(t, queue) == 0 }, waitLimit, pollEvery)
	cancel()
	require.NoError(t, <-errc)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 3, peak)
}
