package console

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/loopbackidp"
)

// signedIn is a console behind an httptest server, a provider, and a
// client that signed in as the officer.
func signedIn(t *testing.T) (*httptest.Server, *http.Client) {
	t.Helper()
	idp, err := loopbackidp.Start("127.0.0.1:0", "craig-archive", []loopbackidp.Person{
		{Subject: "officer@agency.example", Name: "Officer", Role: "officer", Scopes: []string{"archive:read"}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = idp.Close() })
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, []byte("services:\n  - {name: rules, url: \"http://127.0.0.1:1\"}\n"), 0o600))
	srv := httptest.NewUnstartedServer(nil)
	env := map[string]string{EnvAddr: srv.Listener.Addr().String(), EnvIssuer: idp.Issuer(), EnvClientID: "c", EnvFleetFile: fleet}
	cfg, err := LoadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	c, err := New(cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	require.NoError(t, err)
	srv.Config.Handler = c
	srv.Start()
	t.Cleanup(srv.Close)
	idp.AddClient(loopbackidp.Client{ID: "c", RedirectURIs: []string{srv.URL + "/auth/callback"}})
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	resp, err := client.Get(srv.URL + "/")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Contains(t, string(page), "Officer")
	// The provider's page: post its form as the person.
	form := url.Values{"person": {"officer@agency.example"}}
	for k, v := range resp.Request.URL.Query() {
		form.Set(k, v[0])
	}
	resp, err = client.PostForm(idp.Issuer()+"/authorize", form)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), "Continue to the console")
	return srv, client
}

func TestSignInAndHeaders(t *testing.T) {
	srv, client := signedIn(t)
	resp, err := client.Get(srv.URL + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Contains(t, string(body), "rules does not answer", "a service that does not answer is named")
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.NotContains(t, csp, "unsafe-inline")
	require.NotContains(t, string(body), "<script")
	for _, c := range client.Jar.Cookies(resp.Request.URL) {
		require.NotContains(t, c.Value, ".", "the browser holds a random id, never a token")
	}
}

func TestFormWithoutCSRFTokenIsRefused(t *testing.T) {
	srv, client := signedIn(t)
	resp, err := client.PostForm(srv.URL+"/holds", url.Values{"service": {"rules"}, "title": {"x"}, "reason": {"y"}})
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(body), "This form was refused")
	require.False(t, strings.Contains(string(body), "rules does not answer"), "refused before any service is called")
}
