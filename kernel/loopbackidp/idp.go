// Package loopbackidp is an OpenID Connect provider for demos and tests,
// served on loopback only: authorization code flow with PKCE (S256 only),
// a page that signs in one of a fixed list of people (no password: it is
// never an agency's identity provider), ID tokens and access tokens signed
// ES256 with a key made at start, and the JWKS the services verify access
// tokens with (auth.jwks_file). See ADR-074.
package loopbackidp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Token lifetimes: an access token lives as long as a demo's working hour
// (the console signs the person out when it expires); a code only as long
// as the redirect back takes.
const (
	AccessTokenTTL = time.Hour
	codeTTL        = time.Minute
	// keyID names the signing key in the JWKS.
	keyID = "loopback-idp-1"
)

// Person is someone the provider can sign in: the token's sub, a display
// name and role, and the scopes the role grants.
type Person struct {
	Subject string
	Name    string
	Role    string
	Scopes  []string
}

// Client is a relying party: its id and the redirect URIs it may use
// (compared exactly).
type Client struct {
	ID           string
	RedirectURIs []string
}

// Provider is a running provider.
type Provider struct {
	issuer   string
	audience string
	key      *ecdsa.PrivateKey
	people   []Person
	clients  map[string]Client
	server   *http.Server
	now      func() time.Time

	mu    sync.Mutex
	codes map[string]grant
}

// grant is an issued code, redeemed once.
type grant struct {
	client, redirect, challenge, nonce string
	person                             Person
	scopes                             []string
	expires                            time.Time
}

// pkceChallenge is an S256 challenge: base64url of a SHA-256, 43
// characters (RFC 7636 allows 43 to 128 of the unreserved set).
var pkceChallenge = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

// ErrNotLoopback refuses an address that is not a loopback one.
var ErrNotLoopback = errors.New("loopbackidp: serves on a loopback address only")

// Start serves a provider on addr (a loopback host; port 0 picks one).
// Access tokens carry audience as their aud.
func Start(addr, audience string, people []Person, clients []Client) (*Provider, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("loopbackidp: %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%w: %q", ErrNotLoopback, addr)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("loopbackidp: %w", err)
	}
	p := &Provider{issuer: "http://" + l.Addr().String(), audience: audience, key: key, people: people,
		clients: map[string]Client{}, now: time.Now, codes: map[string]grant{}}
	for _, c := range clients {
		p.clients[c.ID] = c
	}
	p.server = &http.Server{Handler: p.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

// Issuer is the provider's issuer URL (http://127.0.0.1:port).
func (p *Provider) Issuer() string { return p.issuer }

// Close stops the provider.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.server.Shutdown(ctx)
}

// AddClient registers a relying party (a console started after the
// provider, on a port it learns only then).
func (p *Provider) AddClient(c Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clients[c.ID] = c
}

func (p *Provider) client(id string) (Client, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[id]
	return c, ok
}

// JWKS is the public key set (what a service's auth.jwks_file holds).
func (p *Provider) JWKS() []byte {
	point, _ := p.key.PublicKey.Bytes() // 0x04 || X || Y, 32 bytes each on P-256
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": keyID, "alg": "ES256", "use": "sig",
		"x": b64(point[1:33]), "y": b64(point[33:65]),
	}}})
	return b
}

// Mint is an access token for sub with scopes, valid for ttl (the demo's
// craigctl operators, which sign in by no browser).
func (p *Provider) Mint(sub string, scopes []string, ttl time.Duration) (string, error) {
	now := p.now()
	return p.sign(jwt.MapClaims{"iss": p.issuer, "sub": sub, "aud": p.audience, "scope": strings.Join(scopes, " "),
		"iat": now.Unix(), "exp": now.Add(ttl).Unix()})
}

func (p *Provider) sign(c jwt.MapClaims) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodES256, c)
	t.Header["kid"] = keyID
	return t.SignedString(p.key)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func (p *Provider) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(p.JWKS())
	})
	mux.HandleFunc("GET /authorize", p.authorizePage)
	mux.HandleFunc("POST /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	return mux
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": p.issuer, "authorization_endpoint": p.issuer + "/authorize", "token_endpoint": p.issuer + "/token",
		"jwks_uri": p.issuer + "/jwks", "response_types_supported": []string{"code"},
		"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"ES256"},
		"code_challenge_methods_supported": []string{"S256"}, "grant_types_supported": []string{"authorization_code"},
		"token_endpoint_auth_methods_supported": []string{"none"},
	})
}

// request is an authorization request, checked.
type request struct {
	client, redirect, state, nonce, challenge string
	scopes                                    []string
}

// checkRequest validates an authorization request: a known client, its
// exact redirect URI, response_type code, S256 PKCE, a state.
func (p *Provider) checkRequest(get func(string) string) (request, error) {
	r := request{client: get("client_id"), redirect: get("redirect_uri"), state: get("state"), nonce: get("nonce"),
		challenge: get("code_challenge"), scopes: strings.Fields(get("scope"))}
	c, ok := p.client(r.client)
	switch {
	case !ok:
		return r, errors.New("unknown client_id")
	case !slices.Contains(c.RedirectURIs, r.redirect):
		return r, errors.New("redirect_uri is not registered for this client")
	case get("response_type") != "code":
		return r, errors.New("response_type must be code")
	case get("code_challenge_method") != "S256" || !pkceChallenge.MatchString(r.challenge):
		return r, errors.New("PKCE with code_challenge_method S256 is required")
	case r.state == "":
		return r, errors.New("state is required")
	case !slices.Contains(r.scopes, "openid"):
		return r, errors.New("scope must include openid")
	}
	return r, nil
}

func (p *Provider) authorizePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req, err := p.checkRequest(q.Get)
	if err != nil {
		http.Error(w, "invalid authorization request: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' "+originOf(req.redirect))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = pageTemplate.Execute(w, map[string]any{"People": p.people, "Query": q})
}

func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	req, err := p.checkRequest(r.PostForm.Get)
	if err != nil {
		http.Error(w, "invalid authorization request: "+err.Error(), http.StatusBadRequest)
		return
	}
	i := slices.IndexFunc(p.people, func(x Person) bool { return x.Subject == r.PostForm.Get("person") })
	if i < 0 {
		http.Error(w, "unknown person", http.StatusBadRequest)
		return
	}
	code := randomHex(32)
	person := p.people[i]
	granted := []string{"openid"}
	for _, s := range req.scopes {
		if slices.Contains(person.Scopes, s) {
			granted = append(granted, s)
		}
	}
	p.mu.Lock()
	p.codes[code] = grant{client: req.client, redirect: req.redirect, challenge: req.challenge, nonce: req.nonce,
		person: person, scopes: granted, expires: p.now().Add(codeTTL)}
	p.mu.Unlock()
	sep := "?"
	if strings.Contains(req.redirect, "?") {
		sep = "&"
	}
	http.Redirect(w, r, req.redirect+sep+"code="+code+"&state="+urlEscape(req.state), http.StatusSeeOther)
}

func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, "invalid_request")
		return
	}
	f := r.PostForm
	if user, _, ok := r.BasicAuth(); ok && f.Get("client_id") == "" {
		f.Set("client_id", user) // client_secret_basic: a public client sends no secret
	}
	p.mu.Lock()
	g, ok := p.codes[f.Get("code")]
	delete(p.codes, f.Get("code")) // a code is redeemed once, whatever the outcome
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(f.Get("code_verifier")))
	switch {
	case f.Get("grant_type") != "authorization_code":
		tokenError(w, "unsupported_grant_type")
		return
	case !ok || p.now().After(g.expires) || g.client != f.Get("client_id") || g.redirect != f.Get("redirect_uri"):
		tokenError(w, "invalid_grant")
		return
	case b64(sum[:]) != g.challenge:
		tokenError(w, "invalid_grant")
		return
	}
	now := p.now()
	access, err := p.sign(jwt.MapClaims{"iss": p.issuer, "sub": g.person.Subject, "aud": p.audience, "client_id": g.client,
		"scope": strings.Join(g.scopes[1:], " "), "iat": now.Unix(), "exp": now.Add(AccessTokenTTL).Unix()})
	if err != nil {
		tokenError(w, "server_error")
		return
	}
	id, err := p.sign(jwt.MapClaims{"iss": p.issuer, "sub": g.person.Subject, "aud": g.client, "nonce": g.nonce,
		"name": g.person.Name, "role": g.person.Role, "iat": now.Unix(), "exp": now.Add(AccessTokenTTL).Unix()})
	if err != nil {
		tokenError(w, "server_error")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"access_token": access, "token_type": "Bearer", "id_token": id,
		"expires_in": int(AccessTokenTTL.Seconds()), "scope": strings.Join(g.scopes, " ")})
}

func tokenError(w http.ResponseWriter, code string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
