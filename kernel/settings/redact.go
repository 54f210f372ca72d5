package settings

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// redactedMark replaces a secret wherever a value is shown.
const redactedMark = "xxxxx"

// sensitiveName matches the names of keys, URL query parameters and DSN
// fields whose values are secrets.
var sensitiveName = regexp.MustCompile(`(?i)(password|passwd|secret|token|credential|private|signature|access_?key)`)

// dsnSecret finds key=value pairs of a libpq keyword/value connection string
// whose key names a secret; the value may be single-quoted.
var dsnSecret = regexp.MustCompile(`(?i)\b([a-z_]*(?:password|passwd|secret|token)[a-z_]*)\s*=\s*('(?:\\.|[^'\\])*'|[^\s]*)`)

// Redact returns raw with every secret it may carry replaced: the password
// of a URL's userinfo, query parameters named like secrets (password,
// sslpassword, token, secret, access_key …) and, for a libpq keyword/value
// string (host=… password=…), the values of such keywords. A URL that does
// not parse is not shown at all. Use it for every URL or DSN that reaches an
// error, a log line, a metric or a report.
func Redact(raw string) string {
	if !strings.Contains(raw, "://") {
		if strings.Contains(raw, "=") {
			return dsnSecret.ReplaceAllString(raw, "${1}="+redactedMark)
		}
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable url>"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redactedMark)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for name, vals := range q {
			if sensitiveName.MatchString(name) {
				for i := range vals {
					vals[i] = redactedMark
				}
			} else {
				for i, v := range vals {
					if strings.Contains(v, "://") {
						vals[i] = Redact(v) // e.g. an endpoint with userinfo
					}
				}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// secretKey reports whether a settings key holds a secret: its value is
// never shown, only whether it is set.
func secretKey(key string) bool {
	last := key[strings.LastIndex(key, ".")+1:]
	return sensitiveName.MatchString(last)
}

// urlKey reports whether a settings key holds a URL or DSN (shown redacted).
func urlKey(key string) bool {
	last := key[strings.LastIndex(key, ".")+1:]
	return strings.HasSuffix(last, "url") || strings.HasSuffix(last, "endpoint") || strings.HasSuffix(last, "dsn")
}

// displayValue is how an error shows key's value: secrets as a mark, URLs
// and DSNs redacted, anything else as it is.
func displayValue(key string, v any) string {
	s := fmt.Sprint(v)
	switch {
	case secretKey(key):
		if s == "" || s == `""` {
			return `""`
		}
		return "<redacted>"
	case urlKey(key):
		return Redact(s)
	}
	return s
}
