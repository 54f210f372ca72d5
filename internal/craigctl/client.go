package craigctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Bounds of the HTTP client.
const (
	// dialTimeout bounds a TCP connect and a TLS handshake: a service that
	// does not accept within 10 s is down or firewalled.
	dialTimeout = 10 * time.Second
	// maxAnswerBytes bounds a JSON answer read into memory (a page of 1,000
	// records is under 1 MiB).
	maxAnswerBytes = 64 << 20
)

// APIError is a non-2xx answer of the admin API.
type APIError struct {
	Status  int
	Code    string // the answer's "error"
	Message string // the answer's "message", when any
	Body    map[string]any
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("the service answered %d %s", e.Status, e.Code)
	if e.Code == "" {
		msg = fmt.Sprintf("the service answered %d", e.Status)
	}
	switch {
	case e.Message != "":
		msg += ": " + e.Message
	case e.Code == "insufficient_scope":
		msg += fmt.Sprintf(": the token lacks the scope %v", e.Body["required"])
	case e.Code == "archiver_disabled":
		msg += fmt.Sprintf(": set %v=true on the service to consent to archiving", e.Body["knob"])
	case e.Code == "purged":
		msg += fmt.Sprintf(": archive %v was purged at %v", e.Body["archive_id"], e.Body["purged_at"])
	}
	return msg
}

// ExitCode: 401 and a missing scope or a forbidden self-approval are auth
// (5), a disabled archiver 3, a refused value 2, the rest failed (1).
func (e *APIError) ExitCode() int {
	switch {
	case e.Status == http.StatusUnauthorized:
		return ExitAuth
	case e.Status == http.StatusForbidden && e.Code == "archiver_disabled":
		return ExitDisabled
	case e.Status == http.StatusForbidden:
		return ExitAuth
	case e.Status == http.StatusBadRequest:
		return ExitUsage
	default:
		return ExitFailed
	}
}

// client calls one service's admin API with its bearer token. The token is
// only ever put in the Authorization header: never in a URL, an error or
// output.
type client struct {
	service string
	base    *url.URL
	token   string
	timeout time.Duration
	http    *http.Client
}

func newClient(service string, base *url.URL, token string, timeout time.Duration, hc *http.Client) *client {
	if hc == nil {
		d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
		hc = &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, DialContext: d.DialContext, TLSHandshakeTimeout: dialTimeout,
			MaxIdleConns: 4, IdleConnTimeout: 90 * time.Second,
		}}
	}
	return &client{service: service, base: base, token: token, timeout: timeout, http: hc}
}

// endpoint is base + path (escaped segments) + query.
func (c *client) endpoint(path string, q url.Values) string {
	u := *c.base
	u.Path = c.base.Path + path
	u.RawQuery = q.Encode()
	return u.String()
}

// request builds a request with the token and a JSON body (nil: none).
func (c *client) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, q), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do makes one call bounded by the timeout and decodes a 2xx JSON answer
// into out (which may be nil); the raw answer is returned for --json.
func (c *client) do(ctx context.Context, method, path string, q url.Values, body, out any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.callErr(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, c.callErr(err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, answerErr(resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("%s %s: the answer is not the expected JSON: %w", method, path, err)
		}
	}
	return bytes.TrimSpace(raw), nil
}

// callErr names the service and what stopped the call.
func (c *client) callErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s did not answer within --timeout %v: %w", c.service, c.timeout, err)
	}
	return fmt.Errorf("%s: %w", c.service, err)
}

// answerErr decodes an error answer.
func answerErr(status int, raw []byte) *APIError {
	e := &APIError{Status: status}
	if json.Unmarshal(raw, &e.Body) == nil {
		e.Code, _ = e.Body["error"].(string)
		e.Message, _ = e.Body["message"].(string)
	} else if s := strings.TrimSpace(string(raw)); s != "" && len(s) < 200 {
		e.Message = s
	}
	return e
}

// idleReader cancels its call when no byte arrives for the timeout: a
// stream of a large range may take long, a silent one is hung.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	limit time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	ir.timer.Reset(ir.limit)
	return n, err
}

// stream makes a GET whose 2xx answer is read through fn, bounded by the
// timeout between bytes rather than overall.
func (c *client) stream(ctx context.Context, path string, q url.Values, fn func(io.Reader) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := fmt.Errorf("%s sent nothing for --timeout %v", c.service, c.timeout)
	timer := time.AfterFunc(c.timeout, func() { cancel(idle) })
	defer timer.Stop()
	req, err := c.request(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return errors.Join(c.callErr(err), context.Cause(ctx))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return answerErr(resp.StatusCode, raw)
	}
	if err := fn(&idleReader{r: resp.Body, timer: timer, limit: c.timeout}); err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return fmt.Errorf("%w: %w", cause, err)
		}
		return err
	}
	return nil
}
