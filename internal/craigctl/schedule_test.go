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

const fleetSchedule = `version: "2026-01"
items:
  - id: R-1
    series: rule_evaluations
    starts: record
    retain: P3Y
    authority: agency policy 3
  - id: A-1
    series: audit_log
    starts: [record, case.closed]
    retain: P10Y
    authority: GRS-2482, authorized 1998-03-20
`

// TestScheduleProposeSplitsTheFleet: with --fleet, each archiving service
// gets the items of its own tables (a service that archives nothing gets
// nothing); an item naming a table no service archives is a usage error and
// nothing is sent.
func TestScheduleProposeSplitsTheFleet(t *testing.T) {
	t.Parallel()
	archiving := func(svc string) http.HandlerFunc {
		return answer(200, fmt.Sprintf(`{"service":%q,"event_outbox_retention_days":30,"event_inbox_retention_days":31,"replay_max_age_days":30,"tables":{},"archive":{"subject_key_fingerprint":"f"}}`, svc))
	}
	state := func(series string) http.HandlerFunc {
		return answer(200, fmt.Sprintf(`{"series":[%q],"in_force":null,"history":[]}`, series))
	}
	proposed := answer(201, `{"version":"2026-01","status":"proposed","nearer":0,"nearer_series":[]}`)
	rules := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": archiving("rules"), "GET /admin/retention/schedule": state("rule_evaluations"),
		"POST /admin/retention/schedule": proposed})
	security := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": archiving("security"), "GET /admin/retention/schedule": state("audit_log"),
		"POST /admin/retention/schedule": proposed})
	exchange := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": answer(200,
		`{"service":"exchange","event_outbox_retention_days":30,"event_inbox_retention_days":31,"replay_max_age_days":30,"tables":{}}`)})
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - name: rules\n    url: %s\n  - name: security\n    url: %s\n  - name: exchange\n    url: %s\n",
		rules.srv.URL, security.srv.URL, exchange.srv.URL), 0o600))
	doc := filepath.Join(dir, "schedule.yaml")
	require.NoError(t, os.WriteFile(doc, []byte(fleetSchedule), 0o600))

	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "schedule", "propose", doc, "--fleet", fleet)
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"service":"rules"`)
	require.Contains(t, r.out, `"service":"security"`)
	for f, id := range map[*fake]string{rules: "R-1", security: "A-1"} {
		var posted []map[string]any
		for _, c := range f.calls {
			if c.Method == http.MethodPost {
				posted = append(posted, c.Body)
			}
		}
		require.Len(t, posted, 1)
		items := posted[0]["items"].([]any)
		require.Len(t, items, 1, "only its own table's item")
		require.Equal(t, id, items[0].(map[string]any)["id"])
		require.Equal(t, "2026-01", posted[0]["version"])
	}

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(fleetSchedule+"  - id: X\n    series: payments\n    starts: record\n    retain: P1Y\n    authority: a\n"), 0o600))
	before := len(rules.calls)
	r = run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "schedule", "propose", bad, "--fleet", fleet)
	require.Equal(t, craigctl.ExitUsage, r.code, r.errOut)
	require.Contains(t, r.errOut, `items[2] (X): series: "payments" is not an archived table`)
	for _, c := range rules.calls[before:] {
		require.NotEqual(t, http.MethodPost, c.Method, "nothing sent")
	}
}
