//go:build faults

package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/rules"
)

// apiSecret is the HS256 key of the suite's serves.
const apiSecret = "faults-suite-archive-api-secret-0123456789"

// serveBoot bounds a serve's start-up (store probe included).
const serveBoot = 30 * time.Second

// served is a `serve` child process.
type served struct {
	addr   string
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	stderr *bytes.Buffer
}

// startServe starts bin (a rules binary) serve on a free loopback port with
// env and waits until /healthz answers.
func startServe(t *testing.T, bin string, env []string) *served {
	t.Helper()
	return startServiceServe(t, bin, rules.Name, env)
}

// startServiceServe starts service's serve: with the suite's API key and no
// broker unless env names one (env wins over these defaults).
func startServiceServe(t *testing.T, bin, service string, env []string) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	s := &served{addr: addr, done: make(chan struct{}), stderr: &bytes.Buffer{}}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append([]string{settings.EnvVar(service, "auth.jwt_hs256_secret") + "=" + apiSecret,
		// No broker: the lazy publisher retries in the background, the API serves.
		settings.EnvVar(service, "amqp_url") + "=amqp://guest:guest@127.0.0.1:1/"},
		append(env, settings.EnvVar(service, "http_addr")+"="+addr)...)
	s.cmd.Stderr = s.stderr
	require.NoError(t, s.cmd.Start())
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(serveBoot)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			t.Fatalf("serve exited at boot: %v: %s", s.err, s.stderr)
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("serve did not answer within %v: %s", serveBoot, s.stderr)
	return nil
}

// killed waits for the process to end and reports whether SIGKILL ended it.
func (s *served) killed(t *testing.T) bool {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		t.Fatal("serve did not end")
	}
	var ee *exec.ExitError
	if errors.As(s.err, &ee) {
		ws, _ := ee.Sys().(syscall.WaitStatus)
		return ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	return false
}

// stop ends the process (SIGTERM, then SIGKILL after 30 s).
func (s *served) stop(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func token(t *testing.T, sub, scope string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "scope": scope, "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString([]byte(apiSecret))
	require.NoError(t, err)
	return s
}

// post calls the served API; a dropped connection is returned as an error.
func (s *served) post(ctx context.Context, path, tok, body string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.addr+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func mustPost(t *testing.T, s *served, path, tok, body string) string {
	t.Helper()
	code, out, err := s.post(context.Background(), path, tok, body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, fmt.Sprintf("%s: %s", path, out))
	return out
}
