package console

// Attacks on the console: each test asserts the behaviour the guarantee
// promises.

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/loopbackidp"
)

// hostileEnv is a console over the given fleet (services by name -> URL),
// signed in as the officer through the loopback provider.
type hostileEnv struct {
	srv     *httptest.Server
	client  *http.Client
	console *Console
	idp     *loopbackidp.Provider
}

func hostileSetup(t *testing.T, services map[string]string, tweak func(*Config)) *hostileEnv {
	t.Helper()
	idp, err := loopbackidp.Start("127.0.0.1:0", "craig-archive", []loopbackidp.Person{
		{Subject: "officer@agency.example", Name: "Officer", Role: "officer", Scopes: []string{"archive:read", "archive:hold", "archive:purge", "records:review"}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = idp.Close() })
	var yml strings.Builder
	yml.WriteString("services:\n")
	for n, u := range services {
		fmt.Fprintf(&yml, "  - {name: %s, url: %q}\n", n, u)
	}
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, []byte(yml.String()), 0o600))
	srv := httptest.NewUnstartedServer(nil)
	env := map[string]string{EnvAddr: srv.Listener.Addr().String(), EnvIssuer: idp.Issuer(), EnvClientID: "c", EnvFleetFile: fleet}
	cfg, err := LoadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	srv.Config.Handler = c
	srv.Start()
	t.Cleanup(srv.Close)
	idp.AddClient(loopbackidp.Client{ID: "c", RedirectURIs: []string{srv.URL + "/auth/callback"}})
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	e := &hostileEnv{srv: srv, client: client, console: c, idp: idp}
	e.signIn(t, "/")
	return e
}

// signIn goes through /auth/login?return=ret and the provider's form; it
// answers the console's continue page.
func (e *hostileEnv) signIn(t *testing.T, ret string) string {
	t.Helper()
	resp, err := e.client.Get(e.srv.URL + "/auth/login?return=" + url.QueryEscape(ret))
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	form := url.Values{"person": {"officer@agency.example"}}
	for k, v := range resp.Request.URL.Query() {
		form.Set(k, v[0])
	}
	resp, err = e.client.PostForm(e.idp.Issuer()+"/authorize", form)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), "Continue to the console")
	return string(body)
}

func (e *hostileEnv) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	resp, err := e.client.Get(e.srv.URL + path)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b)
}

// The page a sign-in returns to stays on the console: "/\host" and
// "/<TAB>/host" (which browsers read as //host in a meta refresh, where
// html/template does not normalise the URL) return to "/".
func TestAttackReturnStaysOnTheConsole(t *testing.T) {
	e := hostileSetup(t, map[string]string{"rules": "http://127.0.0.1:1"}, nil)
	for _, ret := range []string{"/\\evil.example/phish", "/\t/evil.example/phish"} {
		page := e.signIn(t, ret)
		i := strings.Index(page, `http-equiv="refresh"`)
		require.GreaterOrEqual(t, i, 0)
		refresh := page[i : i+strings.Index(page[i:], ">")]
		t.Logf("return=%q -> %s", ret, refresh)
		require.NotContains(t, refresh, "evil.example", "return=%q must not reach the meta refresh as a protocol-relative URL", ret)
	}
}

// The same in a real browser: after signing in with
// return=/\127.0.0.1:<other port>/phish, Chromium stays on the console.
func TestAttackReturnStaysOnTheConsoleInABrowser(t *testing.T) {
	// runChromium fails under CI=true without a browser, skips elsewhere.
	var hit atomic.Bool
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hit.Store(true)
		_, _ = io.WriteString(w, "<title>phish</title>attacker page")
	}))
	defer attacker.Close()
	e := hostileSetup(t, map[string]string{"rules": "http://127.0.0.1:1"}, nil)
	aurl, _ := url.Parse(attacker.URL)
	ret := "/\\" + aurl.Host + "/phish"
	loc := browseSignIn(t, e.srv.URL+"/auth/login?return="+url.QueryEscape(ret))
	t.Logf("browser ended at %s", loc)
	require.False(t, hit.Load() || strings.HasPrefix(loc, attacker.URL), "the console redirected the signed-in person to %s", loc)
}

// A fleet file's plain-http service off loopback is refused: every
// person's bearer token would cross the network in clear text.
func TestAttackFleetRefusesPlainHTTPOffLoopback(t *testing.T) {
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, []byte("services:\n  - {name: rules, url: \"http://rules.agency.example:8080\"}\n"), 0o600))
	env := map[string]string{EnvIssuer: "http://127.0.0.1:9", EnvClientID: "c", EnvFleetFile: fleet}
	_, err := LoadConfig(func(k string) string { return env[k] })
	require.Error(t, err, "a service reached over plain http off loopback must be refused (tokens in clear text)")
}

// A public URL with a query, a fragment or user info is refused at load
// (the redirect URI is "<public URL>/auth/callback").
func TestAttackPublicURLRefusesQueryFragmentUserinfo(t *testing.T) {
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, []byte("services:\n  - {name: rules, url: \"https://rules.agency.example\"}\n"), 0o600))
	for _, pub := range []string{"https://records.agency.example?x=1", "https://records.agency.example#top", "https://user:pw@records.agency.example"} {
		env := map[string]string{EnvPublicURL: pub, EnvIssuer: "https://idp.agency.example", EnvClientID: "c", EnvFleetFile: fleet}
		cfg, err := LoadConfig(func(k string) string { return env[k] })
		if err == nil {
			t.Errorf("%s=%q accepted; redirect URI would be %q", EnvPublicURL, pub, cfg.PublicURL.String()+"/auth/callback")
		}
	}
}

// A case download is complete or refused: one cut short (a service that
// stops mid-answer) is a page naming it, never a truncated 200.
func TestAttackDownloadCutShortIsRefused(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range 10 {
			fmt.Fprintf(w, "{\"table\":\"t\",\"source\":\"hot\",\"row\":{\"id\":\"%d\"}}\n", i)
		}
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the service dies mid-answer: no summary line
	}))
	defer svc.Close()
	e := hostileSetup(t, map[string]string{"rules": svc.URL}, nil)
	resp, body := e.get(t, "/case/download?service=rules&subject=case:7")
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.Contains(t, body, "cut short")
	require.NotContains(t, resp.Header.Get("Content-Disposition"), "attachment")
}

// A page waits at most about one API timeout for a slow service, however
// many calls it makes of it (one per pending purge on the approvals page),
// and names it.
func TestAttackPageBoundedBySlowService(t *testing.T) {
	const purges = 12
	var calls atomic.Int32
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(700 * time.Millisecond) // within the 1s timeout
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/admin/archive/records":
			_, _ = io.WriteString(w, `{"records":[]}`)
		case r.URL.Path == "/admin/archive/purges":
			var ids []string
			for i := range purges {
				ids = append(ids, fmt.Sprintf(`{"purge_id":"00000000-0000-0000-0000-%012d"}`, i))
			}
			_, _ = io.WriteString(w, `{"purges":[`+strings.Join(ids, ",")+`]}`)
		case strings.HasPrefix(r.URL.Path, "/admin/archive/purges/"):
			_, _ = io.WriteString(w, `{"requested_by":"x","archives":[]}`)
		case r.URL.Path == "/admin/subjects/orders":
			_, _ = io.WriteString(w, `{"expungements":[]}`)
		case r.URL.Path == "/admin/retention/schedule":
			_, _ = io.WriteString(w, `{"history":[]}`)
		default:
			_, _ = io.WriteString(w, `{"dispositions":[]}`)
		}
	}))
	defer svc.Close()
	e := hostileSetup(t, map[string]string{"rules": svc.URL}, nil)
	e.console.cfg.APITimeout = time.Second
	_, body := e.get(t, "/approvals")
	// Each call takes 0.7 s: within the service's 1 s budget at most two
	// start (at 0 and 0.7 s); the rest are never made, and the page says
	// the service did not answer in time instead of waiting 13 × 0.7 s.
	require.LessOrEqual(t, calls.Load(), int32(2), "the page kept calling past its budget for the service")
	require.Contains(t, body, "rules does not answer")
}

// User-controlled text from a service (hold titles, reasons, error codes)
// is escaped on every page.
func TestAttackHoldTitleEscaped(t *testing.T) {
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>"'><a href="javascript:alert(3)">x</a>`
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/admin/archive/holds" {
			fmt.Fprintf(w, `{"holds":[{"id":%q,"title":%q,"reason":%q,"created_by":%q,"active":true,"covers":[]},{"id":"h2","title":"t","reason":"r","created_by":"x","active":false,"released_by":%q,"release_reason":%q}]}`,
				evil, evil, evil, evil, evil, evil)
			return
		}
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"error":%q,"message":%q,"required":%q}`, evil, evil, evil)
	}))
	defer svc.Close()
	e := hostileSetup(t, map[string]string{"rules": svc.URL}, nil)
	_, page := e.get(t, "/holds")
	require.NotContains(t, page, "<script")
	require.NotContains(t, page, "<img")
	require.NotContains(t, page, `href="javascript:`)
	_, page = e.get(t, "/")
	require.NotContains(t, page, "<script")
	require.NotContains(t, page, "<img")
}

// The person's token goes only to the fleet file's URLs: a redirect from a
// service is not followed (Go would forward Authorization to another port
// of the same host, or from https to http).
func TestAttackTokenNeverFollowsARedirect(t *testing.T) {
	var mu sync.Mutex
	var got string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Get("Authorization")
		mu.Unlock()
		_, _ = io.WriteString(w, `{"holds":[]}`)
	}))
	defer other.Close()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer svc.Close()
	e := hostileSetup(t, map[string]string{"rules": svc.URL}, nil)
	_, _ = e.get(t, "/holds")
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, got, "the bearer token reached %s, a listener not in the fleet", other.URL)
}

// Sign-ins in progress are bounded: anyone can reach /auth/login (no
// session needed), so a flood is refused once the bound is reached instead
// of growing the console's memory; the page each returns to is bounded too.
func TestAttackLoginFloodBounded(t *testing.T) {
	e := hostileSetup(t, map[string]string{"rules": "http://127.0.0.1:1"}, nil)
	e.console.sessions.mu.Lock()
	e.console.sessions.maxLogins = 100
	e.console.sessions.mu.Unlock()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	refused := 0
	for range 200 {
		resp, err := noFollow.Get(e.srv.URL + "/auth/login?return=/" + strings.Repeat("a", 4000))
		require.NoError(t, err)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			refused++
		}
	}
	e.console.sessions.mu.Lock()
	n := len(e.console.sessions.logins)
	for _, l := range e.console.sessions.logins {
		require.Equal(t, "/", l.returnTo, "a 4 kB return is not kept")
	}
	e.console.sessions.mu.Unlock()
	require.LessOrEqual(t, n, 100)
	require.Positive(t, refused, "sign-ins past the bound are refused")
}

// browseSignIn opens start in Chromium, signs in as the officer at the
// provider and answers where the browser ends.
func browseSignIn(t *testing.T, start string) string {
	t.Helper()
	return runChromium(t, start)
}
