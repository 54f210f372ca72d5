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

const deadID2 = "0192f0aa-1111-7222-8333-444455556667"

var unauthorized = answer(401, `{"error":"invalid_token"}`)

// TestHostileOutboxRetryManyWithABadToken: retrying two ids with a token
// the service refuses is an auth failure (exit 5), as for one id; a script
// that refreshes its token on 5 must not see "failed" (1).
func TestHostileOutboxRetryManyWithABadToken(t *testing.T) {
	t.Parallel()
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /admin/outbox/dead-letters/" + deadID + "/retry":  unauthorized,
		"POST /admin/outbox/dead-letters/" + deadID2 + "/retry": unauthorized,
	})
	r := run(t, "", false, env(f), "outbox", "dead-letters", "retry", deadID, "--service", "rules")
	require.Equal(t, craigctl.ExitAuth, r.code, r.errOut)
	r = run(t, "", false, env(f), "outbox", "dead-letters", "retry", deadID, deadID2, "--service", "rules")
	require.Equal(t, craigctl.ExitAuth, r.code, "every call refused the token: %s", r.errOut)
	require.NotContains(t, r.errOut+r.out, testToken)
}

// TestHostileOutboxListFleetWithABadToken: every service of the fleet
// refuses the token: exit 5, not 1.
func TestHostileOutboxListFleetWithABadToken(t *testing.T) {
	t.Parallel()
	a := newFake(t, map[string]http.HandlerFunc{"GET /admin/outbox/dead-letters": unauthorized})
	b := newFake(t, map[string]http.HandlerFunc{"GET /admin/outbox/dead-letters": unauthorized})
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n", a.srv.URL, b.srv.URL), 0o600))
	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "outbox", "dead-letters", "list", "--fleet", fleet)
	require.Equal(t, craigctl.ExitAuth, r.code, "every service refused the token: %s", r.errOut)
	require.NotContains(t, r.errOut+r.out, testToken)
}

// TestHostileOutboxRetryFleetSkipsADownService: with --fleet the id is
// looked for on every service; the first service being down must not stop
// the retry on the service that has it.
func TestHostileOutboxRetryFleetSkipsADownService(t *testing.T) {
	t.Parallel()
	down := newFake(t, map[string]http.HandlerFunc{})
	downURL := down.srv.URL
	down.srv.Close()
	has := newFake(t, map[string]http.HandlerFunc{"POST /admin/outbox/dead-letters/" + deadID + "/retry": answer(200, `{"id":"`+deadID+`","retried_by":"ops:alice"}`)})
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n", downURL, has.srv.URL), 0o600))
	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "outbox", "dead-letters", "retry", deadID, "--fleet", fleet)
	require.Len(t, has.seen(), 1, "the service holding the dead letter was never asked: %s", r.errOut)
}

// TestHostileOutboxUsage: ids in other spellings and odd flags are usage
// errors (2) before any call.
func TestHostileOutboxUsage(t *testing.T) {
	t.Parallel()
	f := newFake(t, map[string]http.HandlerFunc{})
	for _, args := range [][]string{
		{"retry", "urn:uuid:" + deadID, "--service", "rules"},
		{"retry", "00000000-0000-0000-0000-000000000000", "--service", "rules"},
		{"retry", "' OR 1=1 --", "--service", "rules"},
		{"list", "--service", "rules", "--limit", "-1"},
		{"list", "--service", "rules", "--limit", "99999999999999999999"},
		{"list", "--service", "rules", "--after", "{" + deadID + "}"},
		{"retry", "--service", "rules"}, // no id at all: a usage error (2), not a failure (1)
	} {
		r := run(t, "", false, env(f), append([]string{"outbox", "dead-letters"}, args...)...)
		require.Equal(t, craigctl.ExitUsage, r.code, "%v: %s", args, r.errOut)
	}
	require.Empty(t, f.seen())
}
