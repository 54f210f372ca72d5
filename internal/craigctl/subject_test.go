package craigctl_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
)

func subjectStream(lines ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = fmt.Fprint(w, strings.Join(lines, "\n")+"\n")
	}
}

// TestSubjectFetch: one service's subject stream to a file (rows only, its
// summary on stderr); a fleet's into one file with the service first on
// each line, a service that archives nothing (404) skipped; a malformed
// subject is a usage error that calls nothing; a stream cut before its
// summary writes no file.
func TestSubjectFetch(t *testing.T) {
	t.Parallel()
	const sum = `{"summary":{"tables":["rule_evaluations"],"archives_read":1,"rows":2,"purged_archives":1}}`
	rows := []string{
		`{"table":"rule_evaluations","source":"archive","archive_id":"11111111-1111-1111-1111-111111111111","row":{"id":"a"}}`,
		`{"table":"rule_evaluations","source":"hot","archive_id":null,"row":{"id":"b"}}`,
	}
	archiving := answer(200, `{"service":"x","tables":{},"archive":{"enabled":true,"hot_window_days":90,"retention_days":{}}}`)
	rules := newFake(t, map[string]http.HandlerFunc{"GET /admin/subjects/case:17/rows": subjectStream(append(rows, sum)...), "GET /admin/retention": archiving})
	dir := t.TempDir()
	out := filepath.Join(dir, "case17.ndjson")
	r := run(t, "", false, env(rules), "subject", "fetch", "CASE:017", "--service", "rules", "--out", out)
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, strings.Join(rows, "\n")+"\n", string(b), "rows verbatim, no summary in the file")
	require.Equal(t, "/admin/subjects/case:17/rows", rules.seen()[0].Path, "the canonical spelling is sent")
	require.Contains(t, r.errOut, "2 row(s) of case:17")
	require.Contains(t, r.errOut, "MISSING: 1 purged archive(s)")

	security := newFake(t, map[string]http.HandlerFunc{"GET /admin/subjects/case:17/rows": subjectStream(
		`{"table":"audit_log","source":"hot","archive_id":null,"row":{"id":"c"}}`,
		`{"summary":{"tables":["audit_log","dead_letter_audit"],"archives_read":0,"rows":1,"purged_archives":0}}`), "GET /admin/retention": archiving})
	exchange := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": answer(200, `{"service":"exchange","tables":{}}`)})
	fleet := filepath.Join(dir, "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: exchange, url: %s}\n  - {name: security, url: %s}\n",
		rules.srv.URL, exchange.srv.URL, security.srv.URL), 0o600))
	all := filepath.Join(dir, "fleet.ndjson")
	r = run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "subject", "fetch", "case:17", "--fleet", fleet, "--out", all)
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	b, err = os.ReadFile(all)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 3)
	require.True(t, strings.HasPrefix(lines[0], `{"service":"rules","table":"rule_evaluations"`), lines[0])
	require.True(t, strings.HasPrefix(lines[2], `{"service":"security","table":"audit_log"`), lines[2])
	require.Contains(t, r.errOut, "exchange: serves no subject reads")

	// An archiving service whose subject route answers 404 (its archive
	// API not served, a wrong URL) fails the fetch: no file claims to be
	// whole without it.
	unserved := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": archiving})
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n",
		rules.srv.URL, unserved.srv.URL), 0o600))
	missing := filepath.Join(dir, "missing.ndjson")
	r = run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "subject", "fetch", "case:17", "--fleet", fleet, "--out", missing)
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.NoFileExists(t, missing)

	for _, bad := range []string{"case-17", "case:", "17", "household:3", "case:1 7"} {
		before := len(rules.seen())
		r = run(t, "", false, env(rules), "subject", "fetch", bad, "--service", "rules")
		require.Equal(t, craigctl.ExitUsage, r.code, bad)
		require.Len(t, rules.seen(), before, "nothing is called")
	}
	r = run(t, "", false, env(rules), "subject", "fetch", "case:17", "--service", "rules", "--fleet", fleet)
	require.Equal(t, craigctl.ExitUsage, r.code)

	cut := newFake(t, map[string]http.HandlerFunc{"GET /admin/subjects/case:17/rows": subjectStream(rows...)})
	partial := filepath.Join(dir, "cut.ndjson")
	r = run(t, "", false, env(cut), "subject", "fetch", "case:17", "--service", "rules", "--out", partial)
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.NoFileExists(t, partial, "a fetch for a hearing is whole or absent")
}

// TestHoldCreateSubject: --subject sends the canonical subjects; a bad one
// is a usage error.
func TestHoldCreateSubject(t *testing.T) {
	t.Parallel()
	f := newFake(t, map[string]http.HandlerFunc{"POST /admin/archive/holds": answer(201,
		`{"id":"h1","title":"t","active":true,"archive_ids":[],"subject_hashes":["ab"],"covers":[],"created_at":"2026-01-01T00:00:00Z"}`)})
	r := run(t, "", false, env(f), "archive", "hold", "create", "--service", "rules", "--title", "family", "--reason", "subpoena",
		"--subject", "case:017", "--subject", "PERSON:4")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Equal(t, []any{"case:17", "person:4"}, f.seen()[0].Body["subjects"])
	require.Contains(t, r.out, "1 subject(s)")
	r = run(t, "", false, env(f), "archive", "hold", "create", "--service", "rules", "--title", "t", "--reason", "r", "--subject", "case-17")
	require.Equal(t, craigctl.ExitUsage, r.code)
	require.Len(t, f.seen(), 1)
}

// TestFleetCheckSubjectHolds: a subject hold active on one archiving
// service and not on another is a violation; services that archive
// nothing are not asked; released holds do not count.
func TestFleetCheckSubjectHolds(t *testing.T) {
	t.Parallel()
	h := func(active bool, hashes ...string) string {
		return fmt.Sprintf(`{"id":"h","active":%v,"subject_hashes":[%s],"archive_ids":[],"covers":[]}`, active, `"`+strings.Join(hashes, `","`)+`"`)
	}
	vs := craigctl.CheckSubjectHolds(nil)
	require.Empty(t, vs)
	retention := func(svc, archive string) http.HandlerFunc {
		return answer(200, fmt.Sprintf(`{"service":%q,"event_outbox_retention_days":30,"event_inbox_retention_days":31,"replay_max_age_days":30,"tables":{}%s}`, svc, archive))
	}
	const keyed = `,"archive":{"enabled":true,"hot_window_days":90,"retention_days":{},"subject_key_fingerprint":"0011223344556677"}`
	rules := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("rules", keyed),
		"GET /admin/archive/holds": answer(200, `{"holds":[`+h(true, "aaaa", "bbbb")+","+h(false, "cccc")+"]}")})
	security := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("security", keyed),
		"GET /admin/archive/holds": answer(200, `{"holds":[`+h(true, "aaaa")+"]}")})
	exchange := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("exchange", "")})
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n  - {name: exchange, url: %s}\n",
		rules.srv.URL, security.srv.URL, exchange.srv.URL), 0o600))
	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitFailed, r.code, r.out+r.errOut)
	require.Contains(t, r.out, "VIOLATION subject_hold_everywhere")
	require.Contains(t, r.out, "held on [rules] and not on security")
	require.Equal(t, 1, strings.Count(r.out, "VIOLATION"), "bbbb only: aaaa is on both, cccc is released, exchange archives nothing")
	require.Empty(t, exchange.seen()[1:], "a service that archives nothing is not asked for holds")

	// An archiving service whose holds answer 404 (its archive API not
	// served, a wrong URL) has no holds: rules' subject holds are then
	// one-sided, reported, never skipped.
	unserved := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("security", keyed)})
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n",
		rules.srv.URL, unserved.srv.URL), 0o600))
	r = run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Equal(t, 2, strings.Count(r.out, "VIOLATION subject_hold_everywhere"), "aaaa and bbbb are held on rules only: %s", r.out)

	// Different subject keys (or one missing) are reported.
	otherKey := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("security",
		`,"archive":{"enabled":true,"hot_window_days":90,"retention_days":{},"subject_key_fingerprint":"ffeeddccbbaa9988"}`),
		"GET /admin/archive/holds": answer(200, `{"holds":[`+h(true, "aaaa", "bbbb")+"]}")})
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n",
		rules.srv.URL, otherKey.srv.URL), 0o600))
	r = run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.out, "VIOLATION subject_key_same")
	require.Equal(t, 1, strings.Count(r.out, "VIOLATION"), r.out)
}
