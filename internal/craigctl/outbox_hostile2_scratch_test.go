package craigctl_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
)

var retryPath = "POST /admin/outbox/dead-letters/" + deadID + "/retry"

func hostile2Fleet(t *testing.T, urls ...string) string {
	t.Helper()
	names := []string{"rules", "security", "intake"}
	var b strings.Builder
	b.WriteString("services:\n")
	for i, u := range urls {
		fmt.Fprintf(&b, "  - {name: %s, url: %s}\n", names[i], u)
	}
	p := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o600))
	return p
}

var retried = answer(200, `{"id":"`+deadID+`","retried_by":"ops:alice"}`)

// TestHostile2RetryFleetPastA401: one service of the fleet refuses the token
// (its verifier misconfigured, another issuer); the dead letter lives in
// another service's outbox. An event lives in one outbox, so a refusal by a
// service that may not even hold it is not "the answer": the retry must
// still reach the service that holds it.
func TestHostile2RetryFleetPastA401(t *testing.T) {
	t.Parallel()
	refuses := newFake(t, map[string]http.HandlerFunc{retryPath: unauthorized})
	has := newFake(t, map[string]http.HandlerFunc{retryPath: retried})
	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "outbox", "dead-letters", "retry", deadID,
		"--fleet", hostile2Fleet(t, refuses.srv.URL, has.srv.URL))
	require.Len(t, has.seen(), 1, "one service refusing the token stopped the fleet retry before the service holding the dead letter (exit %d): %s", r.code, r.errOut)
}

// TestHostile2RetryFleetPastA503: a service behind a gateway that is down
// answers 503 (not JSON): it did not answer, like a refused connection, and
// must be passed over like one.
func TestHostile2RetryFleetPastA503(t *testing.T) {
	t.Parallel()
	down := newFake(t, map[string]http.HandlerFunc{retryPath: func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "no healthy upstream")
	}})
	has := newFake(t, map[string]http.HandlerFunc{retryPath: retried})
	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "outbox", "dead-letters", "retry", deadID,
		"--fleet", hostile2Fleet(t, down.srv.URL, has.srv.URL))
	require.Len(t, has.seen(), 1, "a 503 from a gateway stopped the fleet retry before the service holding the dead letter (exit %d): %s", r.code, r.errOut)
}

// TestHostile2RetryFleet401And404: neither service has it as far as anyone
// can tell, one because it refused the token: the only obstacle is
// authentication (5), whatever the order.
func TestHostile2RetryFleet401And404(t *testing.T) {
	t.Parallel()
	refuses := newFake(t, map[string]http.HandlerFunc{retryPath: unauthorized})
	missing := newFake(t, map[string]http.HandlerFunc{retryPath: answer(404, `{"error":"not_found"}`)})
	for _, order := range [][]string{{refuses.srv.URL, missing.srv.URL}, {missing.srv.URL, refuses.srv.URL}} {
		r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "outbox", "dead-letters", "retry", deadID, "--fleet", hostile2Fleet(t, order...))
		require.Equal(t, craigctl.ExitAuth, r.code, "%v: %s", order, r.errOut)
	}
}

// TestHostile2RetryFleetDownAndNoneHasIt: one service down, the other has
// no such event: failed (1), naming the service not asked.
func TestHostile2RetryFleetDownAndNoneHasIt(t *testing.T) {
	t.Parallel()
	down := newFake(t, map[string]http.HandlerFunc{})
	downURL := down.srv.URL
	down.srv.Close()
	missing := newFake(t, map[string]http.HandlerFunc{retryPath: answer(404, `{"error":"not_found"}`)})
	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "outbox", "dead-letters", "retry", deadID, "--fleet", hostile2Fleet(t, downURL, missing.srv.URL))
	require.Equal(t, craigctl.ExitFailed, r.code, r.errOut)
	require.Contains(t, r.errOut, "rules")
	require.Empty(t, r.out)
}

// TestHostile2RetryFleet409StopsThere: the first service holds the row but
// it is not a dead letter (409): that is the answer, the others are not
// asked, failed (1).
func TestHostile2RetryFleet409StopsThere(t *testing.T) {
	t.Parallel()
	pending := newFake(t, map[string]http.HandlerFunc{retryPath: answer(409, `{"error":"not_dead_lettered","state":"pending"}`)})
	other := newFake(t, map[string]http.HandlerFunc{retryPath: retried})
	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "outbox", "dead-letters", "retry", deadID, "--fleet", hostile2Fleet(t, pending.srv.URL, other.srv.URL))
	require.Equal(t, craigctl.ExitFailed, r.code, r.errOut)
	require.Empty(t, other.seen())
}

// TestHostile2RetryDuplicateIDs: the same id twice (a paste of a listing, an
// id in two spellings) retries it once; the second retry answers 409
// (pending: the first just returned it to the drain) and must not turn a
// successful retry into a failure (1).
func TestHostile2RetryDuplicateIDs(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	f := newFake(t, map[string]http.HandlerFunc{retryPath: func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			retried(w, r)
			return
		}
		answer(409, `{"error":"not_dead_lettered","state":"pending"}`)(w, r)
	}})
	r := run(t, "", false, env(f), "outbox", "dead-letters", "retry", deadID, strings.ToUpper(deadID), "--service", "rules")
	require.Equal(t, craigctl.ExitOK, r.code, "a duplicated id made a successful retry exit %d after %d calls: %s", r.code, len(f.seen()), r.errOut)
}
