package app_test

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
)

// switchProxy forwards TCP connections to upstream while up; while down it
// closes every forwarded connection and every new one at once (a broker
// that is down).
type switchProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	up       bool
	conns    []net.Conn
}

func newSwitchProxy(t *testing.T, upstream string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &switchProxy{ln: ln, upstream: upstream}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.set(false) })
	return p
}

func (p *switchProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.up
		p.mu.Unlock()
		if !up {
			_ = c.Close()
			continue
		}
		u, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
		go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
	}
}

func (p *switchProxy) set(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = up
	if !up {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

// TestServeRidesOutABrokerOutage: with RabbitMQ down
// serve refused to boot (so sweeps and metrics stopped too), and an outage
// later was invisible (/readyz 200, no outbox metrics). Now serve boots with
// the broker down, /readyz says so, the outbox gauges and the failure
// counter show the stopped drain, and once the broker is back the publisher
// reconnects by itself and the pending event goes out.
func TestServeRidesOutABrokerOutage(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, testSpec().MigrationSets()...)
	amqpURL := kerneltest.AMQPURL(t)
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	proxy := newSwitchProxy(t, u.Host)
	proxied := *u
	proxied.Host = proxy.ln.Addr().String()
	exchangeName := tempExchange(t, amqpURL, "outage")

	id := stageEvent(t, db, `{"case":1}`)

	logs := &syncBuffer{}
	addr, done, stop := startServe(t, db, proxied.String(), exchangeName, logs)
	defer stop()
	get := getter(addr)
	waitFor(t, "serve to boot with the broker down", 15*time.Second, func() bool { code, _ := get("/healthz"); return code == http.StatusOK })
	code, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "broker unreachable")
	waitFor(t, "the outbox gauges", 10*time.Second, func() bool {
		_, m := get("/metrics")
		return strings.Contains(m, "outbox_pending_rows 1") && strings.Contains(m, "outbox_oldest_pending_age_seconds ")
	})
	waitFor(t, "a counted publish failure", 10*time.Second, func() bool {
		_, m := get("/metrics")
		return strings.Contains(m, "outbox_publish_failures_total ") && !strings.Contains(m, "outbox_publish_failures_total 0\n")
	})
	require.Contains(t, logs.String(), "cannot reach the broker")
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL AND last_error IS NULL`),
		"the row is not blamed for the outage")
	select {
	case c := <-done:
		t.Fatalf("serve exited (%d) while the broker was down: %s", c, logs.String())
	default:
	}

	proxy.set(true)
	waitFor(t, "the event published after the broker came back", 60*time.Second, func() bool {
		return db.Count(t, `SELECT count(*) FROM event_outbox WHERE id = $1 AND published_at IS NOT NULL`, id) == 1
	})
	waitFor(t, "/readyz 200", 10*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	require.Contains(t, logs.String(), "rabbitmq publisher reconnected")

	// A later outage is visible without any event pending, and so is the
	// recovery: the publisher reconnects by itself.
	proxy.set(false)
	waitFor(t, "/readyz 503 after the broker went away", 30*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusServiceUnavailable })
	require.Zero(t, db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL`), "nothing pending")
	proxy.set(true)
	waitFor(t, "/readyz 200 after the broker came back, nothing pending", 60*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusOK })

	stop()
	select {
	case c := <-done:
		require.Equal(t, app.ExitOK, c, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// syncBuffer is a log sink safe for serve's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
