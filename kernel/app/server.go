package app

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits of the HTTP server: nobody can hold it open. A client that trickles
// its headers or body, or keeps idle connections, is cut off; connections
// beyond the cap wait in the kernel's accept queue instead of taking file
// descriptors.
const (
	// readHeaderTimeout bounds slow-header clients (Slowloris).
	readHeaderTimeout = 5 * time.Second
	// readTimeout bounds reading a whole request, body included: the
	// admin API's bodies are a few hundred bytes.
	readTimeout = 15 * time.Second
	// writeTimeout bounds a request from the end of its headers to the end
	// of the response: a replay of replay_max_rows rows in batches takes
	// seconds, /metrics milliseconds.
	writeTimeout = 2 * time.Minute
	// idleTimeout closes keep-alive connections idle this long.
	idleTimeout = 30 * time.Second
	// maxHeaderBytes is far above any real request's headers (a bearer
	// token included).
	maxHeaderBytes = 16 << 10
	// maxConnections caps concurrent connections, well below the process's
	// file-descriptor limit (1024 by default), so the pool, the broker and
	// the store keep theirs.
	maxConnections = 256
	// shutdownTimeout is how long in-flight HTTP requests get on stop.
	shutdownTimeout = 10 * time.Second
)

// ServerLimits are the HTTP server's bounds; DefaultServerLimits are the
// constants above (tests shorten them).
type ServerLimits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes, MaxConnections                            int
}

// DefaultServerLimits returns the production limits.
func DefaultServerLimits() ServerLimits {
	return ServerLimits{
		ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout, WriteTimeout: writeTimeout,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes, MaxConnections: maxConnections,
	}
}

// NewServer returns an http.Server for h with lim's timeouts and header
// limit, and ln wrapped so at most lim.MaxConnections are open at once.
func NewServer(h http.Handler, ln net.Listener, lim ServerLimits) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
	}
	return srv, limitListener(ln, lim.MaxConnections)
}

// limitListener accepts at most n connections at once (as x/net's
// netutil.LimitListener): Accept waits for a slot.
func limitListener(ln net.Listener, n int) net.Listener {
	return &limitedListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitedListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
