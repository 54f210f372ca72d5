package craigctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
)

const testToken = "tok-0123456789-secret-never-printed"

// call is one request the fake service saw.
type call struct {
	Method, Path, Query, Auth string
	Body                      map[string]any
}

// fake is an admin API answering from a table of path → handler, recording
// every call.
type fake struct {
	t      *testing.T
	mu     sync.Mutex
	calls  []call
	routes map[string]http.HandlerFunc
	srv    *httptest.Server
}

func newFake(t *testing.T, routes map[string]http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{t: t, routes: routes}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization")}
		b, _ := io.ReadAll(r.Body)
		if len(b) > 0 {
			require.NoError(t, json.Unmarshal(b, &c.Body))
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		h, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) seen() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// result is one craigctl run.
type result struct {
	code        int
	out, errOut string
}

// run runs craigctl with stdin (terminal when tty) and env.
func run(t *testing.T, stdin string, tty bool, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := craigctl.Run(context.Background(), args, craigctl.IO{
		In: strings.NewReader(stdin), Out: &out, Err: &errOut, InTerminal: tty,
		Getenv: func(k string) string { return env[k] },
	})
	require.NotContains(t, out.String()+errOut.String(), testToken, "the token is never printed")
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

func env(f *fake) map[string]string {
	return map[string]string{"CRAIG_TOKEN": testToken, "CRAIG_RULES_URL": f.srv.URL}
}

// TestExitCodes: every documented exit code, from the command line and from
// the service's answers; a usage error calls nothing.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		route  http.HandlerFunc
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		{"ok", answer(200, `{"more":false,"tables":[]}`), nil, []string{"archive", "run"}, craigctl.ExitOK, ""},
		{"no service", nil, nil, []string{"archive", "run", "--service", ""}, craigctl.ExitUsage, "--service is required"},
		{"bad service", nil, nil, []string{"archive", "run", "--service", "Rules;rm"}, craigctl.ExitUsage, "a service name"},
		{"no url", nil, map[string]string{"CRAIG_TOKEN": testToken}, []string{"archive", "run"}, craigctl.ExitUsage, "CRAIG_RULES_URL"},
		{"url with credentials", nil, map[string]string{"CRAIG_TOKEN": testToken, "CRAIG_RULES_URL": "http://u:hunter2@h:1"}, []string{"archive", "run"}, craigctl.ExitUsage, "REDACTED"},
		{"ftp url", nil, map[string]string{"CRAIG_TOKEN": testToken}, []string{"archive", "run", "--url", "ftp://h"}, craigctl.ExitUsage, "not an http(s)"},
		{"no token", nil, map[string]string{"CRAIG_RULES_URL": "http://127.0.0.1:1"}, []string{"archive", "run"}, craigctl.ExitAuth, "no token"},
		{"zero-padded budget", nil, nil, []string{"archive", "run", "--budget", "010"}, craigctl.ExitUsage, "no leading zero"},
		{"budget with a sign", nil, nil, []string{"archive", "run", "--budget", "+5"}, craigctl.ExitUsage, "not a decimal number"},
		{"budget too long", nil, nil, []string{"archive", "run", "--budget", "99999999999999999999"}, craigctl.ExitUsage, "not a decimal number"},
		{"hex budget", nil, nil, []string{"archive", "run", "--budget", "0x10"}, craigctl.ExitUsage, "not a decimal number"},
		{"negative budget", nil, nil, []string{"archive", "run", "--budget", "-1"}, craigctl.ExitUsage, "not a decimal number"},
		{"zero budget", nil, nil, []string{"archive", "run", "--budget", "0"}, craigctl.ExitUsage, "at least 1"},
		{"extra argument", nil, nil, []string{"archive", "run", "now"}, craigctl.ExitUsage, "expected no arguments"},
		{"unknown command", nil, nil, []string{"archive", "explode"}, craigctl.ExitUsage, "unknown command"},
		{"unknown flag", nil, nil, []string{"archive", "run", "--force"}, craigctl.ExitUsage, "unknown flag"},
		{"bad timeout", nil, nil, []string{"archive", "run", "--timeout", "48h"}, craigctl.ExitUsage, "--timeout"},
		{"401", answer(401, `{"error":"invalid_token"}`), nil, []string{"archive", "run"}, craigctl.ExitAuth, "401 invalid_token"},
		{"403 scope", answer(403, `{"error":"insufficient_scope","required":"archive:run"}`), nil, []string{"archive", "run"}, craigctl.ExitAuth, "archive:run"},
		{"403 disabled", answer(403, `{"error":"archiver_disabled","knob":"CRAIG_RULES__ARCHIVE__ENABLED"}`), nil, []string{"archive", "run"}, craigctl.ExitDisabled, "CRAIG_RULES__ARCHIVE__ENABLED"},
		{"400", answer(400, `{"error":"invalid_request","message":"budget must be between 1 and 120"}`), nil, []string{"archive", "run", "--budget", "500"}, craigctl.ExitUsage, "between 1 and 120"},
		{"409", answer(409, `{"error":"already_running"}`), nil, []string{"archive", "run"}, craigctl.ExitFailed, "already_running"},
		{"500 not json", answer(500, `boom`), nil, []string{"archive", "run"}, craigctl.ExitFailed, "500: boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			routes := map[string]http.HandlerFunc{}
			if tc.route != nil {
				routes["POST /admin/archive/run"] = tc.route
			}
			f := newFake(t, routes)
			e := tc.env
			if e == nil {
				e = env(f)
			}
			r := run(t, "", false, e, append(tc.args, "--service", "rules")[:len(tc.args)+boolInt(!hasService(tc.args))*2]...)
			require.Equal(t, tc.code, r.code, r.errOut)
			require.Contains(t, r.errOut, tc.stderr)
			if tc.route == nil {
				require.Empty(t, f.seen(), "a refused command line calls nothing")
			} else {
				require.Equal(t, "Bearer "+testToken, f.seen()[0].Auth)
			}
		})
	}
}

func hasService(args []string) bool {
	for _, a := range args {
		if a == "--service" {
			return true
		}
	}
	return false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// purgeFake answers a dry run with two candidates and records the real
// purge.
func purgeFake(t *testing.T) *fake {
	t.Helper()
	return newFake(t, map[string]http.HandlerFunc{
		"POST /admin/archive/purge": func(w http.ResponseWriter, r *http.Request) {
			var req map[string]any
			require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
			if req["dry_run"] == true {
				answer(200, `{"candidates":["11111111-1111-1111-1111-111111111111","22222222-2222-2222-2222-222222222222"],"more":false}`)(w, r)
				return
			}
			answer(200, `{"purged":["11111111-1111-1111-1111-111111111111","22222222-2222-2222-2222-222222222222"],"more":false,"purge_id":"33333333-3333-3333-3333-333333333333","certificate":"CERT"}`)(w, r)
		},
		"GET /admin/archive/records": answer(200, `{"records":[
			{"archive_id":"11111111-1111-1111-1111-111111111111","table":"rule_evaluations","record_count":500,"first_record_at":"2025-01-01T00:00:00Z","last_record_at":"2025-01-02T00:00:00Z","retention_until":"2026-11-30","legal_hold":false,"holds":[]},
			{"archive_id":"22222222-2222-2222-2222-222222222222","table":"rule_\u001b[31mevaluations","record_count":7,"first_record_at":"2025-02-01T00:00:00Z","last_record_at":"2025-02-02T00:00:00Z","retention_until":"2026-11-29","legal_hold":false,"holds":[]},
			{"archive_id":"99999999-9999-9999-9999-999999999999","table":"rule_evaluations","record_count":1,"first_record_at":"2025-02-01T00:00:00Z","last_record_at":"2025-02-02T00:00:00Z","retention_until":null,"legal_hold":false,"holds":[]}]}`),
	})
}

// TestPurgeAsksToTypeYes: the interactive path (an injected terminal
// reader): only "yes" followed by a newline purges; anything else, EOF, or a
// non-terminal stdin without --yes refuses with exit 4 after the dry run,
// and nothing is destroyed.
func TestPurgeAsksToTypeYes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		stdin  string
		tty    bool
		yes    bool
		code   int
		purged bool
	}{
		{"typed yes", "yes\n", true, false, craigctl.ExitOK, true},
		{"typed yes, CRLF", "yes\r\n", true, false, craigctl.ExitOK, true},
		{"--yes", "", false, true, craigctl.ExitOK, true},
		{"typed no", "no\n", true, false, craigctl.ExitRefused, false},
		{"typed YES", "YES\n", true, false, craigctl.ExitRefused, false},
		{"typed y", "y\n", true, false, craigctl.ExitRefused, false},
		{"typed yes with spaces", " yes \n", true, false, craigctl.ExitRefused, false},
		{"EOF", "", true, false, craigctl.ExitRefused, false},
		{"yes then EOF, no newline", "yes", true, false, craigctl.ExitRefused, false},
		{"not a terminal", "yes\n", false, false, craigctl.ExitRefused, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := purgeFake(t)
			args := []string{"archive", "purge", "--service", "rules", "--limit", "5"}
			if tc.yes {
				args = append(args, "--yes")
			}
			r := run(t, tc.stdin, tc.tty, env(f), args...)
			require.Equal(t, tc.code, r.code, r.errOut)
			calls := f.seen()
			require.Equal(t, map[string]any{"limit": float64(5), "dry_run": true}, calls[0].Body, "the plan comes from a dry run")
			require.Contains(t, r.errOut, "This destroys exactly these 2 archive(s) of rules")
			require.Contains(t, r.errOut, "22222222-2222-2222-2222-222222222222")
			// The prompt shows what is destroyed, not
			// only ids, and server text cannot drive the terminal.
			require.Regexp(t, `11111111-1111-1111-1111-111111111111\s+rule_evaluations\s+500\s+2025-01-01T00:00:00Z\s+2025-01-02T00:00:00Z\s+2026-11-30\s+0`, r.errOut)
			require.Contains(t, r.errOut, `rule_\x1b[31mevaluations`)
			require.NotContains(t, r.errOut, "\x1b")
			require.NotContains(t, r.errOut, "99999999", "only the confirmed archives")
			if tc.purged {
				require.Len(t, calls, 3)
				require.Equal(t, map[string]any{"archive_ids": []any{"11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"}}, calls[2].Body,
					"the purge names exactly the confirmed archives")
				require.Contains(t, r.out, "CERT")
				return
			}
			require.Len(t, calls, 2, "refused: nothing but the dry run and the ledger listing was called")
			require.Contains(t, r.errOut, "refused: nothing was done")
		})
	}
}

// TestDestructiveDryRunsNeverAsk: --dry-run and an empty plan ask nothing
// and destroy nothing; gc and approve ask like purge.
func TestDestructiveDryRunsNeverAsk(t *testing.T) {
	t.Parallel()
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /admin/archive/gc": answer(200, `{"dry_run":true,"orphans":["rules/x.ndjson"],"deleted":[]}`),
		"GET /admin/archive/purges/44444444-4444-4444-4444-444444444444": answer(200, `{"purge_id":"44444444-4444-4444-4444-444444444444",
			"status":"awaiting_approval","requested_by":"ops:alice","archives":[
			{"archive_id":"11111111-1111-1111-1111-111111111111","table":"rule_\u001b[31mevaluations","record_count":500,
			 "first_record_at":"2025-01-01T00:00:00Z","last_record_at":"2025-01-02T00:00:00Z","retention_until":"2026-11-30","due":true},
			{"archive_id":"22222222-2222-2222-2222-222222222222","table":"rule_evaluations","record_count":7,
			 "first_record_at":"2025-02-01T00:00:00Z","last_record_at":"2025-02-02T00:00:00Z","retention_until":null,"due":false}]}`),
		"POST /admin/archive/purges/44444444-4444-4444-4444-444444444444/approve": answer(200,
			`{"purge_id":"44444444-4444-4444-4444-444444444444","purged":["11111111-1111-1111-1111-111111111111"],"skipped":[],"status":"completed","certificate":"C2"}`),
	})
	e := env(f)
	r := run(t, "", false, e, "archive", "gc", "--service", "rules", "--older-than", "7", "--dry-run")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "rules/x.ndjson")
	r = run(t, "nope\n", true, e, "archive", "gc", "--service", "rules", "--older-than", "7")
	require.Equal(t, craigctl.ExitRefused, r.code)
	r = run(t, "yes\n", true, e, "archive", "gc", "--service", "rules", "--older-than", "7")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	last := f.seen()[len(f.seen())-1]
	require.Equal(t, "/admin/archive/gc", last.Path)
	require.Equal(t, []any{"rules/x.ndjson"}, last.Body["keys"], "the collection names exactly the keys shown (on main it deleted by age again)")
	r = run(t, "", false, e, "archive", "purges", "approve", "44444444-4444-4444-4444-444444444444", "--service", "rules")
	require.Equal(t, craigctl.ExitRefused, r.code)
	r = run(t, "yes\n", true, e, "archive", "purges", "approve", "44444444-4444-4444-4444-444444444444", "--service", "rules")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "C2")
	// The approver sees what the approval destroys (it saw only the id on
	// main), the service's text escaped.
	require.Contains(t, r.errOut, "requested by ops:alice")
	require.Regexp(t, `11111111-1111-1111-1111-111111111111\s+rule_\\x1b\[31mevaluations\s+500\s+2025-01-01T00:00:00Z\s+2025-01-02T00:00:00Z\s+2026-11-30\s+yes`, r.errOut)
	require.Regexp(t, `22222222-2222-2222-2222-222222222222\s+rule_evaluations\s+7\s+.*-\s+no: skipped`, r.errOut)
	require.Contains(t, r.errOut, "1 archive(s), 500 record(s) would be destroyed")
	require.NotContains(t, r.errOut, "\x1b")
	var approvals, gcs int
	for _, c := range f.seen() {
		switch {
		case strings.HasSuffix(c.Path, "/approve"):
			approvals++
		case c.Path == "/admin/archive/gc":
			gcs++
			if c.Body["keys"] == nil {
				require.Equal(t, true, c.Body["dry_run"], "a gc call without keys is a dry run")
			}
		}
	}
	require.Equal(t, 1, approvals)
	require.Equal(t, 4, gcs)
}

// TestFetchRange: NDJSON copied line for line; an error line from the
// service fails the fetch (exit 1) and --out is never left half written; a
// service that goes silent is cut off by --timeout.
func TestFetchRange(t *testing.T) {
	t.Parallel()
	rows := "{\"id\":\"a\",\"n\":1}\n{\"hot\": {\"id\":\"b\",\"n\":2}}\n"
	summary := `{"summary": {"table": "rule_evaluations", "from": "2026-01-01T00:00:00Z", "to": "2026-02-01T00:00:00Z", "archived_rows": 1, "hot_rows": 1, "archives": [], "purged_archives": [], "complete": true}}` + "\n"
	purged := `{"summary": {"archived_rows": 1, "hot_rows": 1, "complete": false, "purged_archives": [{"archive_id": "44444444-4444-4444-4444-444444444444", "first_record_at": "2026-01-04T00:00:00Z", "last_record_at": "2026-01-05T00:00:00Z", "record_count": 9, "purged_at": "2026-06-01T00:00:00Z"}]}}` + "\n"
	release := make(chan struct{})
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /admin/archive/rows/rule_evaluations": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			_, _ = io.WriteString(w, rows)
			switch r.URL.Query().Get("from") {
			case "2026-01-02T00:00:00Z":
				_, _ = io.WriteString(w, `{"error":"archive_corrupt"}`+"\n")
			case "2026-01-03T00:00:00Z":
				w.(http.Flusher).Flush()
				<-release
			case "2026-01-04T00:00:00Z":
				_, _ = io.WriteString(w, purged)
			case "2026-01-05T00:00:00Z": // cut short: no summary
			default:
				_, _ = io.WriteString(w, summary)
			}
		},
	})
	t.Cleanup(func() { close(release) })
	dir := t.TempDir()
	out := filepath.Join(dir, "hearing.ndjson")
	e := env(f)
	r := run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--from", "2026-01-01", "--to", "2026-02-01T00:00:00Z", "--out", out)
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, rows, string(got))
	require.Contains(t, r.errOut, "2 row(s) of rule_evaluations")
	require.Contains(t, r.errOut, "1 still in the hot table")

	// Purged archives are named; --strict fails the
	// fetch and writes nothing; a stream without its summary was cut short.
	r = run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--from", "2026-01-04", "--to", "2026-02-01")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.errOut, "MISSING: archive 44444444-4444-4444-4444-444444444444 (9 record(s)")
	strictOut := filepath.Join(t.TempDir(), "strict.ndjson")
	r = run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--from", "2026-01-04", "--to", "2026-02-01", "--strict", "--out", strictOut)
	require.Equal(t, craigctl.ExitFailed, r.code, r.errOut)
	require.Contains(t, r.errOut, "--strict: 1 purged archive(s)")
	require.NoFileExists(t, strictOut)
	r = run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--from", "2026-01-05", "--to", "2026-02-01")
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.errOut, "cut short")
	require.Equal(t, "from=2026-01-01T00%3A00%3A00Z&to=2026-02-01T00%3A00%3A00Z", f.seen()[0].Query)

	out2 := filepath.Join(dir, "corrupt.ndjson")
	r = run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--from", "2026-01-02", "--to", "2026-02-01", "--out", out2)
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.errOut, "archive_corrupt")
	require.NoFileExists(t, out2)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left behind")

	start := time.Now()
	r = run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--from", "2026-01-03", "--to", "2026-02-01", "--timeout", "300ms")
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.errOut, "sent nothing for --timeout 300ms")
	require.Less(t, time.Since(start), 30*time.Second)

	r = run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--from", "2026-01-01", "--to", "2026-02-01", "--out", out)
	require.Equal(t, craigctl.ExitUsage, r.code, "an existing file is never overwritten")
	got, err = os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, rows, string(got))

	for _, bad := range [][]string{
		{"--from", "2026-02-01", "--to", "2026-01-01"}, {"--from", "yesterday", "--to", "2026-01-01"}, {"--from", "2026-01-01"},
		{"--id", "x"}, {"--id", "11111111-1111-1111-1111-111111111111", "--from", "2026-01-01", "--to", "2026-02-01"},
	} {
		r = run(t, "", false, e, append([]string{"archive", "fetch", "rule_evaluations", "--service", "rules"}, bad...)...)
		require.Equal(t, craigctl.ExitUsage, r.code, bad)
	}
	r = run(t, "", false, e, "archive", "fetch", "../etc", "--service", "rules", "--id", "11111111-1111-1111-1111-111111111111")
	require.Equal(t, craigctl.ExitUsage, r.code)
}

// TestFetchByID: the row, where it came from, and the API's statuses.
func TestFetchByID(t *testing.T) {
	t.Parallel()
	const id = "11111111-1111-1111-1111-111111111111"
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /admin/archive/rows/rule_evaluations/" + id: answer(200, `{"source":"archive","archive_id":"55555555-5555-5555-5555-555555555555","row":{"id":"`+id+`","rule_id":"r"}}`),
		"GET /admin/archive/rows/audit_log/" + id:        answer(410, `{"error":"purged","purged_at":"2026-11-01T00:00:00Z","archive_id":"55555555-5555-5555-5555-555555555555"}`),
	})
	e := env(f)
	r := run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--id", id)
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.JSONEq(t, `{"id":"`+id+`","rule_id":"r"}`, r.out)
	require.Contains(t, r.errOut, "archive 55555555-5555-5555-5555-555555555555")
	r = run(t, "", false, e, "archive", "fetch", "rule_evaluations", "--service", "rules", "--id", id, "--json")
	require.Equal(t, craigctl.ExitOK, r.code)
	require.JSONEq(t, `{"source":"archive","archive_id":"55555555-5555-5555-5555-555555555555","row":{"id":"`+id+`","rule_id":"r"}}`, r.out)
	r = run(t, "", false, e, "archive", "fetch", "audit_log", "--service", "rules", "--id", id)
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.errOut, "purged at 2026-11-01T00:00:00Z")
}

// TestHungServiceIsCutOff: a service that accepts and never answers fails
// the call within --timeout (every call is bounded).
func TestHungServiceIsCutOff(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := newFake(t, map[string]http.HandlerFunc{"POST /admin/archive/verify": func(http.ResponseWriter, *http.Request) { <-release }})
	t.Cleanup(func() { close(release) })
	start := time.Now()
	r := run(t, "", false, env(f), "archive", "verify", "--service", "rules", "--timeout", "300ms")
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.errOut, "did not answer within --timeout 300ms")
	require.Less(t, time.Since(start), 30*time.Second)
}

// TestInterruptAtThePromptRefuses: an interrupt while the prompt waits
// refuses (exit 4) without waiting for an answer that never comes.
func TestInterruptAtThePromptRefuses(t *testing.T) {
	t.Parallel()
	f := purgeFake(t)
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	prompted := &signalWriter{want: "Type yes to continue: ", seen: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- craigctl.Run(ctx, []string{"archive", "purge", "--service", "rules", "--limit", "5"}, craigctl.IO{
			In: pr, Out: &out, Err: prompted, InTerminal: true, Getenv: func(k string) string { return env(f)[k] }})
	}()
	select {
	case <-prompted.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("no prompt")
	}
	cancel()
	require.Equal(t, craigctl.ExitRefused, <-done)
	require.Len(t, f.seen(), 2, "nothing but the dry run and the ledger listing")
}

// signalWriter closes seen once want has been written to it.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	done bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}
