package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// provider is the agency's OpenID provider, discovered at first use (a
// console started before its provider still starts).
type provider struct {
	cfg    Config
	client *http.Client
	oauth  *oauth2.Config
	idTok  *oidc.IDTokenVerifier
	mu     sync.Mutex
}

func (p *provider) discover(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oauth != nil {
		return nil
	}
	ctx = oidc.ClientContext(ctx, p.client)
	op, err := oidc.NewProvider(ctx, p.cfg.Issuer)
	if err != nil {
		return fmt.Errorf("the identity provider %s: %w", p.cfg.Issuer, err)
	}
	p.idTok = op.Verifier(&oidc.Config{ClientID: p.cfg.ClientID})
	ep := op.Endpoint()
	ep.AuthStyle = oauth2.AuthStyleInParams // a public client (PKCE): its id in the form, no secret
	p.oauth = &oauth2.Config{ClientID: p.cfg.ClientID, Endpoint: ep, Scopes: p.cfg.Scopes,
		RedirectURL: p.cfg.PublicURL.String() + "/auth/callback"}
	return nil
}

// signIn starts the authorization code flow with PKCE.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.APITimeout)
	defer cancel()
	if err := c.idp.discover(ctx); err != nil {
		c.logger.WarnContext(ctx, "identity provider unreachable", slog.String("issuer", c.cfg.Issuer), slog.Any("error", err))
		c.problem(w, r, http.StatusServiceUnavailable, "The identity provider does not answer",
			"The console could not reach "+c.cfg.Issuer+" to sign you in. Try again in a minute; if it persists, tell your administrator.")
		return
	}
	verifier, nonce := oauth2.GenerateVerifier(), randomID()
	state, ok := c.sessions.startLogin(login{verifier: verifier, nonce: nonce, returnTo: safeReturn(r.URL.Query().Get("return"))})
	if !ok {
		c.problem(w, r, http.StatusServiceUnavailable, "Too many sign-ins in progress",
			"The console is refusing new sign-ins for a few minutes (too many were started and not finished). Try again shortly.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: state, Path: "/auth/", HttpOnly: true, Secure: c.secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(loginTTL.Seconds())})
	http.Redirect(w, r, c.idp.oauth.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oidc.Nonce(nonce)), http.StatusFound)
}

// callback finishes the sign-in: the state matches the browser's cookie,
// the code is exchanged with the PKCE verifier, the ID token is verified
// (issuer, audience, signature, nonce).
func (c *Console) callback(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.APITimeout)
	defer cancel()
	state := r.URL.Query().Get("state")
	ck, err := r.Cookie(loginCookie)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/auth/", MaxAge: -1, HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteLaxMode})
	if err != nil || state == "" || ck.Value != state {
		c.problem(w, r, http.StatusBadRequest, "Sign-in could not be completed", "The sign-in did not start in this browser, or took too long. Sign in again.")
		return
	}
	l, ok := c.sessions.takeLogin(state)
	if !ok || c.idp.discover(ctx) != nil {
		c.problem(w, r, http.StatusBadRequest, "Sign-in could not be completed", "The sign-in expired. Sign in again.")
		return
	}
	s, err := c.exchange(ctx, r.URL.Query().Get("code"), l)
	if err != nil {
		c.logger.WarnContext(ctx, "sign-in refused", slog.Any("error", err))
		c.problem(w, r, http.StatusUnauthorized, "Sign-in could not be completed", "The identity provider's answer was not accepted. Sign in again; if it persists, tell your administrator.")
		return
	}
	id := c.sessions.put(s)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteStrictMode})
	c.logger.InfoContext(ctx, "signed in", slog.String("actor", s.subject))
	// A page of the console's own, not a redirect: a SameSite=Strict
	// cookie is not sent on a redirect chain that began at the provider.
	c.render(w, r, http.StatusOK, "continue", nil, map[string]any{"ReturnTo": safeReturn(l.returnTo)})
}

func (c *Console) exchange(ctx context.Context, code string, l login) (*session, error) {
	ctx = oidc.ClientContext(ctx, c.idp.client)
	tok, err := c.idp.oauth.Exchange(ctx, code, oauth2.VerifierOption(l.verifier))
	if err != nil {
		return nil, fmt.Errorf("exchange: %w", err)
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok {
		return nil, errors.New("no id_token")
	}
	idt, err := c.idp.idTok.Verify(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("id_token: %w", err)
	}
	if idt.Nonce != l.nonce {
		return nil, errors.New("id_token: nonce mismatch")
	}
	var claims struct {
		Name string `json:"name"`
	}
	_ = idt.Claims(&claims)
	scope, _ := tok.Extra("scope").(string)
	expires := tok.Expiry
	if expires.IsZero() {
		expires = idt.Expiry
	}
	return &session{subject: idt.Subject, name: or(claims.Name, idt.Subject), scopes: strings.Fields(scope),
		token: tok.AccessToken, expires: expires}, nil
}

// signOut ends the session (a form, with its CSRF token).
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, _ *session, id string) {
	c.sessions.end(id)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/signed-out", http.StatusSeeOther)
}

// requireSession runs next for a signed-in person; anyone else is sent to
// sign in (a POST is refused: its form came from an ended session).
func (c *Console) requireSession(next func(http.ResponseWriter, *http.Request, *session, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, id, ok := c.sessions.get(r)
		if !ok {
			if r.Method != http.MethodGet {
				c.problem(w, r, http.StatusForbidden, "You are signed out", "Your session ended (signed out, idle for "+c.cfg.IdleTimeout.String()+", or expired). Nothing was changed. Sign in again and repeat the act.")
				return
			}
			http.Redirect(w, r, "/auth/login?return="+url.QueryEscape(r.URL.RequestURI()), http.StatusFound)
			return
		}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil || !csrfOK(s, r.PostForm.Get("csrf")) {
				c.problem(w, r, http.StatusForbidden, "This form was refused",
					"The form did not carry this session's protection token (it came from another site, an old page or another session). Nothing was changed. Reload the page and try again.")
				return
			}
		}
		next(w, r, s, id)
	}
}

// maxReturn bounds the page a sign-in returns to.
const maxReturn = 2048

// safeReturn is a page of the console to return to after sign-in: a path
// (with its query) on the console itself, or "/". Anything a browser could
// read as another origin (a scheme, a host, "//", a backslash, a control
// character or a space) is refused: it would make the sign-in an open
// redirect.
func safeReturn(raw string) string {
	if raw == "" || len(raw) > maxReturn || !strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, "//") {
		return "/"
	}
	for _, r := range raw {
		if r <= ' ' || r == 0x7f || r == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	out := u.EscapedPath()
	if u.RawQuery != "" {
		out += "?" + u.Query().Encode()
	}
	return out
}
