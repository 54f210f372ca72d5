package console

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSignInAndHeaders: a signed-in page carries the CSP (no inline, no
// script), names a service that does not answer, and the browser's cookies
// hold a random id, never a token.
func TestSignInAndHeaders(t *testing.T) {
	e := hostileSetup(t, map[string]string{"rules": "http://127.0.0.1:1"}, nil)
	resp, body := e.get(t, "/")
	require.Contains(t, body, "rules does not answer", "a service that does not answer is named")
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.NotContains(t, csp, "unsafe-inline")
	require.NotContains(t, body, "<script")
	for _, c := range e.client.Jar.Cookies(resp.Request.URL) {
		require.NotContains(t, c.Value, ".", "the browser holds a random id, never a token")
	}
}

// TestFormWithoutCSRFTokenIsRefused: 403 before any service is called.
func TestFormWithoutCSRFTokenIsRefused(t *testing.T) {
	e := hostileSetup(t, map[string]string{"rules": "http://127.0.0.1:1"}, nil)
	resp, err := e.client.PostForm(e.srv.URL+"/holds", url.Values{"service": {"rules"}, "title": {"x"}, "reason": {"y"}})
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(raw), "This form was refused")
	require.False(t, strings.Contains(string(raw), "rules does not answer"), "refused before any service is called")
}
