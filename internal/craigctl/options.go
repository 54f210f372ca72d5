package craigctl

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Bounds of the global flags.
const (
	// DefaultTimeout bounds one API call (a stream: the longest silence).
	// A deep verify of a large ledger answers in minutes, not hours; a call
	// that has not answered in ten minutes is hung.
	DefaultTimeout = 10 * time.Minute
	// MaxTimeout is the longest bound accepted: 24 h. Every call is bounded.
	MaxTimeout = 24 * time.Hour
	// maxTokenBytes bounds a token file's size: a JWT is a few KiB.
	maxTokenBytes = 64 << 10
)

// serviceName is what --service accepts (the environment variable's
// <SVC> is its upper case, '-' as '_').
var serviceName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// options are the global flags.
type options struct {
	io        *IO
	service   string
	url       string
	tokenFile string
	json      bool
	timeout   time.Duration
}

func (o *options) bindGlobal(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&o.service, "service", "", "the service to operate (rules, security, …)")
	f.StringVar(&o.url, "url", "", "the service's admin base URL (default: $CRAIG_<SVC>_URL)")
	f.StringVar(&o.tokenFile, "token-file", "", "read the bearer token from this file (default: $CRAIG_TOKEN)")
	f.BoolVar(&o.json, "json", false, "print JSON (the API's answers) instead of tables")
	f.DurationVar(&o.timeout, "timeout", DefaultTimeout, "bound of one API call; of a stream, the longest silence")
}

// urlEnv is the environment variable naming a service's URL.
func urlEnv(service string) string {
	return "CRAIG_" + strings.ToUpper(strings.ReplaceAll(service, "-", "_")) + "_URL"
}

// target resolves --service, --url and the token into a client.
func (o *options) target() (*client, error) {
	if o.service == "" {
		return nil, usageErr("--service is required (rules, security, …)")
	}
	if !serviceName.MatchString(o.service) {
		return nil, usageErr("--service %q: a service name (lower case letters, digits, '-' and '_')", o.service)
	}
	raw, from := o.url, "--url"
	if raw == "" {
		raw, from = o.io.Getenv(urlEnv(o.service)), urlEnv(o.service)
	}
	if raw == "" {
		return nil, usageErr("no URL for service %s: pass --url or set %s", o.service, urlEnv(o.service))
	}
	base, err := parseBase(raw)
	if err != nil {
		return nil, usageErr("%s: %w", from, err)
	}
	token, err := o.token()
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, &ExitError{Code: ExitAuth, Err: fmt.Errorf("no token: set CRAIG_TOKEN or pass --token-file")}
	}
	return o.client(o.service, base, token)
}

func (o *options) client(service string, base *url.URL, token string) (*client, error) {
	if o.timeout <= 0 || o.timeout > MaxTimeout {
		return nil, usageErr("--timeout %v: between 1s and %v", o.timeout, MaxTimeout)
	}
	return newClient(service, base, token, o.timeout, o.io.HTTP), nil
}

// parseBase checks an admin base URL: http or https, a host, no query.
func parseBase(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q is not an http(s)://host[:port] URL", redactURL(raw))
	}
	if u.User != nil {
		return nil, fmt.Errorf("%q: credentials do not go in the URL; use CRAIG_TOKEN or --token-file", redactURL(raw))
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// redactURL drops any userinfo before a URL is shown.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = url.User("REDACTED")
		return u.String()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "REDACTED@" + raw[i+1:]
	}
	return raw
}

// token is --token-file's content, else $CRAIG_TOKEN ("" when neither).
func (o *options) token() (string, error) {
	if o.tokenFile == "" {
		return strings.TrimSpace(o.io.Getenv("CRAIG_TOKEN")), nil
	}
	return readToken(o.tokenFile)
}

func readToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", usageErr("--token-file: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxTokenBytes {
		return "", usageErr("--token-file %s: not a regular file of at most %d bytes", path, maxTokenBytes)
	}
	b, err := os.ReadFile(path) //nolint:gosec // the operator names the file
	if err != nil {
		return "", usageErr("--token-file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", &ExitError{Code: ExitAuth, Err: fmt.Errorf("--token-file %s is empty", path)}
	}
	return t, nil
}
