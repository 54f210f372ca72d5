package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// contentSecurityPolicy allows the console's own stylesheet and images
// and nothing else: no script at all, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Console is the console's HTTP handler.
type Console struct {
	cfg      Config
	logger   *slog.Logger
	sessions *sessions
	idp      *provider
	client   *http.Client
	secure   bool
	pages    map[string]*template.Template
	handler  http.Handler
}

// New builds the console. Nothing is called at construction: the provider
// is discovered at the first sign-in, the services at each page.
func New(cfg Config, logger *slog.Logger) (*Console, error) {
	// Calls to the services are bounded by their context (a page's
	// APITimeout, an approval's ActTimeout) and never follow a redirect:
	// the person's token goes to the fleet file's URLs and nowhere else.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c := &Console{cfg: cfg, logger: logger, sessions: newSessions(cfg.IdleTimeout), client: client,
		idp: &provider{cfg: cfg, client: &http.Client{Timeout: cfg.APITimeout}}, secure: cfg.PublicURL.Scheme == "https",
		pages: map[string]*template.Template{}}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" || name == "partials" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", n)
		if err != nil {
			return nil, err
		}
		c.pages[name] = t
	}
	c.handler = c.routes()
	return c, nil
}

// ServeHTTP serves the console with its security headers on every answer.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if c.secure {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	c.handler.ServeHTTP(w, r)
}

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /auth/login", c.signIn)
	mux.HandleFunc("GET /auth/callback", c.callback)
	mux.HandleFunc("POST /auth/logout", c.requireSession(c.signOut))
	mux.HandleFunc("GET /signed-out", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusOK, "signedout", nil, nil)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	for pattern, h := range map[string]func(http.ResponseWriter, *http.Request, *session, string){
		"GET /{$}":                   c.fleetPage,
		"POST /fleet/verify":         c.fleetVerify,
		"GET /case":                  c.casePage,
		"GET /case/download":         c.caseDownload,
		"POST /case/hold":            c.caseHold,
		"POST /case/seal":            c.caseSeal,
		"POST /case/expunge":         c.caseExpunge,
		"GET /holds":                 c.holdsPage,
		"POST /holds":                c.holdCreate,
		"POST /holds/release":        c.holdRelease,
		"GET /approvals":             c.approvalsPage,
		"POST /approvals/approve":    c.approve,
		"GET /dispositions":          c.dispositionsPage,
		"POST /dispositions/freeze":  c.dispositionFreeze,
		"POST /dispositions/reject":  c.dispositionReject,
		"GET /certificates":          c.certificatesPage,
		"GET /certificates/view":     c.certificateView,
		"GET /certificates/download": c.certificateDownload,
	} {
		mux.HandleFunc(pattern, c.requireSession(h))
	}
	// Cross-origin form posts are refused before any handler (the CSRF
	// token is checked too, per session).
	return http.NewCrossOriginProtection().Handler(mux)
}

// nav is the menu, in the order a records officer works.
var nav = []struct{ Path, Label string }{
	{"/", "Fleet"}, {"/case", "Case"}, {"/holds", "Holds"}, {"/approvals", "Approvals"},
	{"/dispositions", "Disposition review"}, {"/certificates", "Certificates"},
}

// render executes a page into a buffer first: a template error is never a
// half-written page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, s *session, data map[string]any) {
	t, ok := c.pages[page]
	if !ok {
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	if data == nil {
		data = map[string]any{}
	}
	data["Nav"], data["Path"], data["Session"] = nav, r.URL.Path, s
	if s != nil {
		data["CSRF"], data["Who"], data["Scopes"] = s.csrf, s.name+" ("+s.subject+")", strings.Join(s.scopes, " ")
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", data); err != nil {
		c.logger.ErrorContext(r.Context(), "console page failed", slog.String("page", page), slog.Any("error", err))
		http.Error(w, "the page could not be shown; see the console log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// problem shows a refusal in words, with what to do.
func (c *Console) problem(w http.ResponseWriter, r *http.Request, status int, title, advice string) {
	s, _, _ := c.sessions.get(r)
	c.render(w, r, status, "problem", s, map[string]any{"Title": title, "Advice": advice})
}

var funcs = template.FuncMap{
	"date": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("2006-01-02 15:04 UTC")
		case *time.Time:
			if v == nil {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04 UTC")
		}
		return "—"
	},
	"short": func(s string) string {
		if len(s) > 8 {
			return s[:8]
		}
		return s
	},
	"deref": func(s *string) string {
		if s == nil {
			return "—"
		}
		return *s
	},
}
