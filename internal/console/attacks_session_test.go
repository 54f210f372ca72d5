package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Sessions: idle timeout, sign-out, expired token, a cross-origin post
// with a valid token, a replayed state.
func TestAttackHeldSessionCSRFState(t *testing.T) {
	var calls atomic.Int32
	var auth atomic.Value
	svc := newCountingService(&calls, &auth)
	defer svc.Close()
	e := hostileSetup(t, map[string]string{"rules": svc.URL}, nil)
	_, page := e.get(t, "/holds")
	require.NotContains(t, page, "eyJ", "no token in a page")
	tok, _ := auth.Load().(string)
	require.True(t, strings.HasPrefix(tok, "Bearer eyJ"))
	u, _ := url.Parse(e.srv.URL)
	for _, c := range e.client.Jar.Cookies(u) {
		require.NotContains(t, tok, c.Value)
	}
	i := strings.Index(page, `name="csrf" value="`)
	csrf := page[i+len(`name="csrf" value="`):]
	csrf = csrf[:strings.Index(csrf, `"`)]

	// Cross-origin post carrying the right CSRF token: refused, no call.
	before := calls.Load()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/holds", strings.NewReader(url.Values{"csrf": {csrf}, "service": {"rules"}, "title": {"x"}, "reason": {"y"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := e.client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, before, calls.Load())

	// Idle: past the idle timeout the session is gone, a post is refused.
	e.console.sessions.mu.Lock()
	e.console.sessions.now = func() time.Time { return time.Now().Add(e.console.cfg.IdleTimeout + time.Second) }
	e.console.sessions.mu.Unlock()
	resp, err = e.client.PostForm(e.srv.URL+"/holds", url.Values{"csrf": {csrf}, "service": {"rules"}, "title": {"x"}, "reason": {"y"}})
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, before, calls.Load())
	e.console.sessions.mu.Lock()
	e.console.sessions.now = time.Now
	n := len(e.console.sessions.byID)
	e.console.sessions.mu.Unlock()
	require.Zero(t, n, "the idle session is ended server-side")

	// Replayed state: a callback with a state already used is refused.
	noFollow := &http.Client{Jar: e.client.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noFollow.Get(e.srv.URL + "/auth/login")
	require.NoError(t, err)
	_ = resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	form := url.Values{"person": {"officer@agency.example"}}
	for k, v := range loc.Query() {
		form.Set(k, v[0])
	}
	resp, err = noFollow.PostForm(e.idp.Issuer()+"/authorize", form)
	require.NoError(t, err)
	_ = resp.Body.Close()
	cb := resp.Header.Get("Location")
	resp, err = noFollow.Get(cb)
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// Replay the same callback with the login cookie forged back in.
	req, _ = http.NewRequest(http.MethodGet, cb, nil)
	req.AddCookie(&http.Cookie{Name: loginCookie, Value: loc.Query().Get("state")})
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a replayed state is refused")
}

func newCountingService(calls *atomic.Int32, auth *atomic.Value) *httptestServer {
	return startTestServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"holds":[]}`)
	}))
}

type httptestServer = httptest.Server

func startTestServer(h http.Handler) *httptest.Server { return httptest.NewServer(h) }
