package app_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
)

// startServer serves app.Handler (no database: /healthz needs none) with
// lim on a loopback port and returns its address.
func startServer(t *testing.T, lim app.ServerLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := app.Handler(app.HandlerDeps{Gatherer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv, lln := app.NewServer(h, ln, lim)
	go func() { _ = srv.Serve(lln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func healthz(t *testing.T, addr string) int {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/healthz")
	require.NoError(t, err, "/healthz must keep answering")
	_ = resp.Body.Close()
	return resp.StatusCode
}

// closedWithin reports whether the server closes c within d (a read
// returns EOF or a reset instead of timing out).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return false
	}
	return true
}

// TestServerCutsSlowClients: with no read or idle
// timeout a client trickling a body (or idle keep-alives) pinned a
// connection forever; 300 of them exhausted file descriptors and /healthz
// stopped answering.
func TestServerCutsSlowClients(t *testing.T) {
	t.Parallel()
	lim := app.DefaultServerLimits()
	lim.ReadTimeout, lim.ReadHeaderTimeout, lim.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	lim.MaxConnections = 8
	addr := startServer(t, lim)

	t.Run("TricklingBody", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		_, err = fmt.Fprintf(c, "POST /admin/events/replay HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
		require.NoError(t, err)
		go func() { // one byte every 100 ms: never finishes in time
			for range 30 {
				time.Sleep(100 * time.Millisecond)
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		require.Equal(t, http.StatusOK, healthz(t, addr))
		require.True(t, closedWithin(c, 3*time.Second), "a trickling body is cut off by the read timeout")
	})
	t.Run("TricklingHeaders", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		_, err = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		require.NoError(t, err)
		require.True(t, closedWithin(c, 3*time.Second), "unfinished headers are cut off")
	})
	t.Run("IdleKeepAlivesAndTheCap", func(t *testing.T) {
		// More idle keep-alive connections than the cap: each is closed
		// after the idle timeout, so the cap never starves /healthz.
		var conns []net.Conn
		for range 2 * lim.MaxConnections {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			require.NoError(t, err)
			conns = append(conns, c)
			_, err = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			require.NoError(t, err)
		}
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		require.Equal(t, http.StatusOK, healthz(t, addr), "health checks keep answering past the cap")
		for i, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err, "connection %d was answered", i)
			_ = resp.Body.Close()
			require.True(t, closedWithin(c, 3*time.Second), "idle keep-alive %d is closed", i)
		}
	})
	t.Run("HugeHeader", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		big := make([]byte, 2*lim.MaxHeaderBytes)
		for i := range big {
			big[i] = 'a'
		}
		_, _ = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", big)
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	})
}
