package loopbackidp

import (
	"html/template"
	"net/url"
)

// pageTemplate is the sign-in page: one button per person, the
// authorization request carried in hidden fields.
var pageTemplate = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in: loopback identity provider</title>
<style>body{font-family:sans-serif;max-width:40rem;margin:2rem auto;color:#1a1a1a}
button{font-size:1rem;padding:.6rem 1rem;margin:.3rem 0;border:2px solid #1d4ed8;background:#fff;color:#1d4ed8;cursor:pointer;width:100%;text-align:left}
button:focus{outline:3px solid #f59e0b}</style></head>
<body><main><h1>Sign in</h1>
<p>The demo's identity provider (loopback only, no passwords). Choose who you are:</p>
{{range .People}}<form method="post" action="/authorize">
{{range $k, $v := $.Query}}<input type="hidden" name="{{$k}}" value="{{index $v 0}}">{{end}}
<input type="hidden" name="person" value="{{.Subject}}">
<button type="submit" id="person-{{.Role}}">{{.Name}}: {{.Role}} ({{.Subject}})</button></form>
{{end}}</main></body></html>`))

// originOf is the scheme and host of a URL (the relying party the page's
// form redirects to).
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

func urlEscape(s string) string { return url.QueryEscape(s) }
