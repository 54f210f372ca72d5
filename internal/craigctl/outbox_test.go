package craigctl_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
)

const deadID = "0192f0aa-1111-7222-8333-444455556666"

// TestOutboxDeadLettersList: the table shows each dead letter with its
// attempts and last error (sanitized), --json one line per service; bad
// flags are usage errors before any call.
func TestOutboxDeadLettersList(t *testing.T) {
	t.Parallel()
	f := newFake(t, map[string]http.HandlerFunc{"GET /admin/outbox/dead-letters": answer(200, `{"dead_letters":[{"id":"`+deadID+`","event_type":"rules.unbound",`+
		`"created_at":"2026-12-01T00:00:00Z","attempts":25,"last_error":"returned\u001b[2J","dead_lettered_at":"2026-12-02T00:00:00Z","age_seconds":432000,"dead_for_seconds":345600,"payload_bytes":12}],"total":1}`)})
	r := run(t, "", false, env(f), "outbox", "dead-letters", "list", "--service", "rules")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, deadID)
	require.Contains(t, r.out, "rules.unbound")
	require.Contains(t, r.out, "25")
	require.Contains(t, r.out, "4d")
	require.NotContains(t, r.out, "\x1b", "server text is sanitized")

	r = run(t, "", false, env(f), "outbox", "dead-letters", "list", "--service", "rules", "--json", "--limit", "5")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"service":"rules"`)
	seen := f.seen()
	require.Equal(t, "limit=5", seen[len(seen)-1].Query)

	calls := len(f.seen())
	for _, args := range [][]string{{"--limit", "0"}, {"--limit", "1001"}, {"--after", "nope"}, {"extra"}} {
		r = run(t, "", false, env(f), append([]string{"outbox", "dead-letters", "list", "--service", "rules"}, args...)...)
		require.Equal(t, craigctl.ExitUsage, r.code, "%v: %s", args, r.errOut)
	}
	require.Len(t, f.seen(), calls, "no call for a usage error")
}

// TestOutboxDeadLettersRetryFleet: with --fleet an id is retried on the
// service that has it (404 elsewhere); an id no service has fails (exit 1);
// a pending row's 409 is reported.
func TestOutboxDeadLettersRetryFleet(t *testing.T) {
	t.Parallel()
	path := "POST /admin/outbox/dead-letters/" + deadID + "/retry"
	notFound := answer(404, `{"error":"not_found","message":"outbox: no such event"}`)
	rules := newFake(t, map[string]http.HandlerFunc{path: notFound})
	security := newFake(t, map[string]http.HandlerFunc{path: answer(200, `{"id":"`+deadID+`","retried_by":"ops:alice"}`)})
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n", rules.srv.URL, security.srv.URL), 0o600))
	tok := map[string]string{"CRAIG_TOKEN": testToken}

	r := run(t, "", false, tok, "outbox", "dead-letters", "retry", deadID, "--fleet", fleet)
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"service":"security"`)
	require.Contains(t, r.out, `"retried_by":"ops:alice"`)

	other := "0192f0aa-1111-7222-8333-444455556667"
	r = run(t, "", false, tok, "outbox", "dead-letters", "retry", other, "--fleet", fleet)
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.errOut, "no service of the fleet has it")

	pending := newFake(t, map[string]http.HandlerFunc{path: answer(409, `{"error":"not_dead_lettered","state":"pending"}`)})
	r = run(t, "", false, env(pending), "outbox", "dead-letters", "retry", deadID, "--service", "rules")
	require.Equal(t, craigctl.ExitFailed, r.code, r.errOut)
	require.Contains(t, r.errOut, "not_dead_lettered")

	r = run(t, "", false, env(pending), "outbox", "dead-letters", "retry", "{"+deadID+"}", "--service", "rules")
	require.Equal(t, craigctl.ExitUsage, r.code)
	r = run(t, "", false, tok, "outbox", "dead-letters", "retry", deadID, "--fleet", fleet, "--service", "rules")
	require.Equal(t, craigctl.ExitUsage, r.code)
}
