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

// TestDispositionDueListsEachServiceCase: the table shows each case due
// on each archiving service with its item, authority and holds, and says
// when archives are left unindexed; --as-of is passed on as a date and a
// malformed one is a usage error before any call; --json prints one line
// per service; a service with no schedule in force fails the command.
func TestDispositionDueListsEachServiceCase(t *testing.T) {
	t.Parallel()
	archiving := func(svc string) http.HandlerFunc {
		return answer(200, fmt.Sprintf(`{"service":%q,"event_outbox_retention_days":30,"event_inbox_retention_days":31,"replay_max_age_days":30,"tables":{},"archive":{"subject_key_fingerprint":"f"}}`, svc))
	}
	state := answer(200, `{"series":["rule_evaluations"],"in_force":{"version":"v1"},"history":[]}`)
	due := answer(200, `{"version":"v1","as_of":"2026-12-05","unindexed_archives":3,"items":[{"item":"CW-3","series":"rule_evaluations",
		"authority":"GRS-2482, authorized 1998-03-20","action":"review","rows":5,"cases":[{"subject":"case:41","due":"2025-01-02","rows_hot":2,
		"rows_archived":3,"archives":["0193a6a0-0000-7000-8000-000000000001"],"holds":["0193a6a0-0000-7000-8000-0000000000aa"]}]}]}`)
	rules := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": archiving("rules"), "GET /admin/retention/schedule": state,
		"GET /admin/dispositions/due": due})
	security := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": archiving("security"), "GET /admin/retention/schedule": state,
		"GET /admin/dispositions/due": answer(409, `{"error":"no_schedule_in_force","message":"disposition: no records schedule is in force"}`)})
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - name: rules\n    url: %s\n", rules.srv.URL), 0o600))
	env := map[string]string{"CRAIG_TOKEN": testToken}

	r := run(t, "", false, env, "disposition", "due", "--fleet", fleet, "--as-of", "2027-01-31")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "case:41")
	require.Contains(t, r.out, "GRS-2482, authorized 1998-03-20")
	require.Contains(t, r.out, "3 archives not indexed yet")
	last := rules.calls[len(rules.calls)-1]
	require.Equal(t, "as_of=2027-01-31", last.Query)

	r = run(t, "", false, env, "disposition", "due", "--fleet", fleet, "--json")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"service":"rules"`)
	require.Contains(t, r.out, `"subject":"case:41"`)

	before := len(rules.calls)
	r = run(t, "", false, env, "disposition", "due", "--fleet", fleet, "--as-of", "31/01/2027")
	require.Equal(t, craigctl.ExitUsage, r.code, r.errOut)
	require.Len(t, rules.calls, before, "nothing sent")

	other := filepath.Join(dir, "security.yaml")
	require.NoError(t, os.WriteFile(other, fmt.Appendf(nil, "services:\n  - name: security\n    url: %s\n", security.srv.URL), 0o600))
	r = run(t, "", false, env, "disposition", "due", "--fleet", other)
	require.Equal(t, craigctl.ExitFailed, r.code, r.errOut)
	require.Contains(t, r.errOut, "no_schedule_in_force")
}

// TestDispositionShowAndApprove: show prints the batch, --certificate
// the certificate as the service answers it; approve posts to the batch
// and prints its outcome; a batch id that is not a UUID is a usage error
// before any call; a self-approval (403) is exit 5.
func TestDispositionShowAndApprove(t *testing.T) {
	t.Parallel()
	const id = "0193a6a0-0000-7000-8000-0000000000b1"
	cert := `{"disposition_id":"` + id + `","items":[{"item":"CW-12","authority":"GRS-2482","cases":1,"rows":{"rule_evaluations":4}}]}`
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /admin/dispositions/" + id:                  answer(200, `{"disposition_id":"`+id+`","status":"proposed"}`),
		"GET /admin/dispositions/" + id + "/certificate": answer(200, cert),
		"POST /admin/dispositions/" + id + "/approve":    answer(200, `{"disposition_id":"`+id+`","status":"executed","rows_destroyed":4}`),
	})
	r := run(t, "", false, env(f), "disposition", "show", id, "--service", "rules")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"status": "proposed"`)
	r = run(t, "", false, env(f), "disposition", "show", id, "--service", "rules", "--certificate")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"authority": "GRS-2482"`)
	r = run(t, "", false, env(f), "disposition", "approve", id, "--service", "rules")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"rows_destroyed":4`)
	calls := len(f.seen())
	for _, bad := range []string{"42", "../x", id + "/reject"} {
		r = run(t, "", false, env(f), "disposition", "approve", bad, "--service", "rules")
		require.Equal(t, craigctl.ExitUsage, r.code, "%s: %s", bad, r.errOut)
	}
	require.Equal(t, calls, len(f.seen()), "a usage error calls nothing")

	self := newFake(t, map[string]http.HandlerFunc{"POST /admin/dispositions/" + id + "/approve": answer(403,
		`{"error":"self_approval","message":"disposition: a batch is approved by another identity than its proposer"}`)})
	r = run(t, "", false, env(self), "disposition", "approve", id, "--service", "rules")
	require.Equal(t, craigctl.ExitAuth, r.code, r.errOut)
}

// TestDispositionFreezeRejectAndCaseEvents: freeze sends the limit when
// given (a non-positive one is a usage error), reject the reason and the
// extension, and subject event the event's body; malformed values are
// usage errors before any call.
func TestDispositionFreezeRejectAndCaseEvents(t *testing.T) {
	t.Parallel()
	const id = "0193a6a0-0000-7000-8000-0000000000b2"
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /admin/dispositions":                   answer(201, `{"disposition_id":"`+id+`","status":"proposed"}`),
		"POST /admin/dispositions/" + id + "/reject": answer(200, `{"disposition_id":"`+id+`","status":"rejected"}`),
		"GET /admin/retention/schedule":              answer(200, `{"series":["rule_evaluations"],"in_force":null,"history":[]}`),
		"POST /admin/subjects/case:41/events":        answer(201, `{"changed":true}`),
	})
	r := run(t, "", false, env(f), "disposition", "freeze", "--service", "rules", "--limit", "500")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"status":"proposed"`)
	r = run(t, "", false, env(f), "disposition", "reject", id, "--service", "rules", "--reason", "fair hearing", "--extend-until", "2027-06-30")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	r = run(t, "", false, env(f), "subject", "event", "case:41", "--service", "rules", "--type", "case.closed", "--at", "2020-01-02T03:04:05+02:00",
		"--classification", "Unsubstantiated")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	var bodies []map[string]any
	for _, c := range f.seen() {
		if c.Method == http.MethodPost {
			bodies = append(bodies, c.Body)
		}
	}
	require.Equal(t, []map[string]any{{"limit": 500.0}, {"reason": "fair hearing", "extend_until": "2027-06-30"},
		{"type": "case.closed", "at": "2020-01-02T01:04:05Z", "classification": "Unsubstantiated"}}, bodies)

	calls := len(f.seen())
	for _, bad := range [][]string{
		{"disposition", "freeze", "--service", "rules", "--limit", "0"},
		{"disposition", "reject", id, "--service", "rules"},
		{"disposition", "reject", id, "--service", "rules", "--reason", "x", "--extend-until", "30/06/2027"},
		{"subject", "event", "person:4", "--service", "rules", "--type", "case.closed", "--at", "2020-01-02T03:04:05Z"},
		{"subject", "event", "case:41", "--service", "rules", "--type", "case.deleted", "--at", "2020-01-02T03:04:05Z"},
		{"subject", "event", "case:41", "--service", "rules", "--type", "case.closed", "--at", "yesterday"},
		{"subject", "event", "case:41", "--service", "rules", "--type", "case.merged", "--at", "2020-01-02T03:04:05Z", "--into", "person:1"},
	} {
		r = run(t, "", false, env(f), bad...)
		require.Equal(t, craigctl.ExitUsage, r.code, "%v: %s", bad, r.errOut)
	}
	require.Equal(t, calls, len(f.seen()), "a usage error calls nothing")
}

// TestSubjectFetchTellsTheDisposal: a subject stream whose summary carries
// "disposed" is told on stderr, batch, item and authority.
func TestSubjectFetchTellsTheDisposal(t *testing.T) {
	t.Parallel()
	f := newFake(t, map[string]http.HandlerFunc{"GET /admin/subjects/case:41/rows": answer(200,
		`{"summary":{"tables":["audit_log"],"archives_read":0,"rows":0,"purged_archives":0,"purged_archive_ids":[],`+
			`"disposed":[{"disposition_id":"0193a6a0-0000-7000-8000-0000000000b3","executed_at":"2026-12-05T10:00:00Z","item":"AL-5U",`+
			`"authority":"RP-7","table":"audit_log","rows":3}]}}`)})
	r := run(t, "", false, env(f), "subject", "fetch", "case:41", "--service", "rules")
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.errOut, "rules: DISPOSED: 3 row(s) of audit_log of case:41 destroyed on 2026-12-05T10:00:00Z by disposition 0193a6a0-0000-7000-8000-0000000000b3 under item AL-5U (RP-7)")
}
