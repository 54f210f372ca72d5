package loopbackidp

import (
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The provider refuses non-loopback addresses, unregistered redirect URIs,
// unknown clients, missing or plain PKCE, and a wrong verifier (which
// burns the code).
func TestAttackIdPRefusals(t *testing.T) {
	for _, a := range []string{"0.0.0.0:0", "10.0.0.1:0", ":0", "[::]:0", "localhost.evil.example:0"} {
		_, err := Start(a, "aud", nil, nil)
		require.Error(t, err, a)
	}
	p, err := Start("127.0.0.1:0", "aud", []Person{{Subject: "a", Name: "A", Role: "r", Scopes: []string{"x"}}},
		[]Client{{ID: "c", RedirectURIs: []string{"http://127.0.0.1:1/cb"}}})
	require.NoError(t, err)
	defer func() { _ = p.Close() }()
	verifier := strings.Repeat("v", 50)
	sum := sha256.Sum256([]byte(verifier))
	good := url.Values{"client_id": {"c"}, "redirect_uri": {"http://127.0.0.1:1/cb"}, "response_type": {"code"}, "state": {"s"},
		"scope": {"openid x"}, "code_challenge": {b64(sum[:])}, "code_challenge_method": {"S256"}, "person": {"a"}}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(f url.Values) *http.Response {
		resp, err := noFollow.PostForm(p.Issuer()+"/authorize", f)
		require.NoError(t, err)
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	with := func(k, v string) url.Values {
		f := url.Values{}
		for kk, vv := range good {
			f[kk] = vv
		}
		if v == "" {
			f.Del(k)
		} else {
			f.Set(k, v)
		}
		return f
	}
	for _, f := range []url.Values{with("redirect_uri", "http://127.0.0.1:1/cb/"), with("redirect_uri", "http://evil.example/cb"),
		with("code_challenge", ""), with("code_challenge_method", ""), with("code_challenge_method", "plain"),
		with("client_id", "other")} {
		require.Equal(t, http.StatusBadRequest, post(f).StatusCode, f.Encode())
	}
	resp := post(good)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, _ := url.Parse(resp.Header.Get("Location"))
	code := loc.Query().Get("code")
	tok := func(v string) int {
		r, err := http.PostForm(p.Issuer()+"/token", url.Values{"grant_type": {"authorization_code"}, "code": {code}, "client_id": {"c"},
			"redirect_uri": {"http://127.0.0.1:1/cb"}, "code_verifier": {v}})
		require.NoError(t, err)
		_ = r.Body.Close()
		return r.StatusCode
	}
	require.Equal(t, http.StatusBadRequest, tok("wrong-verifier-"+verifier), "wrong verifier")
	require.Equal(t, http.StatusBadRequest, tok(verifier), "the code was burned by the failed attempt")
}

// An S256 code_challenge is BASE64URL(SHA-256) (RFC 7636 4.2): one with a
// NUL, or of 10 kB, gets no code.
func TestAttackIdPRefusesMalformedChallenge(t *testing.T) {
	p, err := Start("127.0.0.1:0", "aud", []Person{{Subject: "a", Name: "A", Role: "r"}},
		[]Client{{ID: "c", RedirectURIs: []string{"http://127.0.0.1:1/cb"}}})
	require.NoError(t, err)
	defer func() { _ = p.Close() }()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, ch := range []string{strings.Repeat("v", 43) + "\x00", strings.Repeat("<", 10000)} {
		resp, err := noFollow.PostForm(p.Issuer()+"/authorize", url.Values{"client_id": {"c"}, "redirect_uri": {"http://127.0.0.1:1/cb"},
			"response_type": {"code"}, "state": {"s"}, "scope": {"openid"}, "code_challenge": {ch}, "code_challenge_method": {"S256"}, "person": {"a"}})
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "challenge of %d bytes accepted", len(ch))
	}
}
