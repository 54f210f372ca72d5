// Package console is the records officer's console (ADR-074): a handler
// that serves server-rendered pages (html/template, assets embedded) over
// the lifecycle API of each service of a fleet, signed in with the
// agency's OpenID Connect provider. It holds no service credentials: every
// call carries the signed-in person's own access token, so every act is
// attributed to the person who did it.
package console

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults.
const (
	// DefaultAddr is loopback: a console reachable from elsewhere is
	// deployed behind TLS with its public URL set.
	DefaultAddr = "127.0.0.1:8090"
	// DefaultIdleTimeout signs a person out after 15 minutes without a
	// request (NIST SP 800-63B asks at most 30 for AAL2; records work
	// is done in short sessions at shared desks).
	DefaultIdleTimeout = 15 * time.Minute
	// DefaultAPITimeout bounds what a page asks of each service (its
	// calls run side by side, one service per goroutine): a deep read of a
	// case across a year of archives answers in seconds; a service that
	// does not answer in 30 is named on the page and the rest still works.
	DefaultAPITimeout = 30 * time.Second
	// ActTimeout bounds an act that may execute a destruction (an
	// approval, a download of a case): a disposition batch of 10,000 rows
	// executes in seconds, a large one in minutes; a call cut short leaves
	// it for the next approval to finish (ADR-073), so the bound is
	// generous.
	ActTimeout = 10 * time.Minute
	// DefaultScopes are the scopes the console asks the provider for; the
	// provider grants each person those of their role.
	DefaultScopes = "openid profile archive:read archive:hold archive:seal archive:sealed-read archive:purge records:schedule records:events records:review"
)

// The environment keys of the console's configuration.
const (
	EnvAddr        = "CRAIG_CONSOLE_ADDR"
	EnvPublicURL   = "CRAIG_CONSOLE_PUBLIC_URL"
	EnvIssuer      = "CRAIG_CONSOLE_OIDC_ISSUER"
	EnvClientID    = "CRAIG_CONSOLE_OIDC_CLIENT_ID"
	EnvScopes      = "CRAIG_CONSOLE_OIDC_SCOPES"
	EnvFleetFile   = "CRAIG_CONSOLE_FLEET_FILE"
	EnvIdleTimeout = "CRAIG_CONSOLE_IDLE_TIMEOUT"
	EnvAPITimeout  = "CRAIG_CONSOLE_API_TIMEOUT"
)

// Config is the console's validated configuration.
type Config struct {
	Addr        string
	PublicURL   *url.URL
	Issuer      string
	ClientID    string
	Scopes      []string
	Services    []Service
	IdleTimeout time.Duration
	APITimeout  time.Duration
}

// ErrConfig is wrapped by every invalid configuration.
var ErrConfig = errors.New("console: invalid configuration")

func invalid(key, value, why string) error {
	return fmt.Errorf("%w: %s=%q: %s", ErrConfig, key, value, why)
}

// LoadConfig reads and validates the configuration from getenv; an invalid
// value fails naming the variable and the value.
func LoadConfig(getenv func(string) string) (Config, error) {
	c := Config{Addr: or(getenv(EnvAddr), DefaultAddr), Issuer: getenv(EnvIssuer), ClientID: getenv(EnvClientID),
		Scopes: strings.Fields(or(getenv(EnvScopes), DefaultScopes))}
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return c, invalid(EnvAddr, c.Addr, "host:port")
	}
	public := or(getenv(EnvPublicURL), "http://"+c.Addr)
	if c.PublicURL, err = url.Parse(public); err != nil || c.PublicURL.Host == "" || c.PublicURL.Path != "" && c.PublicURL.Path != "/" {
		return c, invalid(EnvPublicURL, public, "an absolute URL with no path, such as https://records.agency.example")
	}
	if c.PublicURL.RawQuery != "" || c.PublicURL.Fragment != "" || c.PublicURL.User != nil || strings.HasSuffix(public, "?") || strings.HasSuffix(public, "#") {
		return c, invalid(EnvPublicURL, public, "no query, fragment or user info: the redirect URI is <public URL>/auth/callback")
	}
	c.PublicURL.Path = ""
	switch {
	case c.PublicURL.Scheme == "https":
	case c.PublicURL.Scheme == "http" && loopback(c.PublicURL.Hostname()) && loopback(host):
	default:
		return c, invalid(EnvPublicURL, public, "https, or http on a loopback address only (session cookies are Secure outside loopback)")
	}
	if u, err := url.Parse(c.Issuer); err != nil || u.Host == "" || !httpsOrLoopback(u) {
		return c, invalid(EnvIssuer, c.Issuer, "the OpenID provider's issuer URL (https; http only on loopback)")
	}
	if strings.TrimSpace(c.ClientID) == "" {
		return c, invalid(EnvClientID, c.ClientID, "the console's client id at the provider")
	}
	if len(c.Scopes) == 0 || c.Scopes[0] != "openid" {
		return c, invalid(EnvScopes, getenv(EnvScopes), "space-separated, starting with openid")
	}
	if c.IdleTimeout, err = duration(getenv, EnvIdleTimeout, DefaultIdleTimeout, time.Minute, 12*time.Hour); err != nil {
		return c, err
	}
	if c.APITimeout, err = duration(getenv, EnvAPITimeout, DefaultAPITimeout, time.Second, 10*time.Minute); err != nil {
		return c, err
	}
	path := getenv(EnvFleetFile)
	if path == "" {
		return c, invalid(EnvFleetFile, path, "the fleet file: services: [{name, url}]")
	}
	if c.Services, err = ReadFleet(path); err != nil {
		return c, fmt.Errorf("%w: %s=%q: %w", ErrConfig, EnvFleetFile, path, err)
	}
	return c, nil
}

func duration(getenv func(string) string, key string, def, lo, hi time.Duration) (time.Duration, error) {
	raw := getenv(key)
	if raw == "" {
		return def, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		if n, nerr := strconv.Atoi(raw); nerr == nil {
			d, err = time.Duration(n)*time.Second, nil
		}
	}
	if err != nil || d < lo || d > hi {
		return 0, invalid(key, raw, fmt.Sprintf("a duration from %v to %v, such as 15m", lo, hi))
	}
	return d, nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// httpsOrLoopback: an https URL, or plain http to a loopback host.
func httpsOrLoopback(u *url.URL) bool {
	return u.Scheme == "https" || u.Scheme == "http" && loopback(u.Hostname())
}
