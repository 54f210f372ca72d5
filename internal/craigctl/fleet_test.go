package craigctl_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
)

func w(svc string, outbox, inbox, replay int) craigctl.Windows {
	return craigctl.Windows{Service: svc, EventOutboxRetentionDays: outbox, EventInboxRetentionDays: inbox, ReplayMaxAgeDays: replay}
}

// TestCheckFleet: the window rules of ADR-022 across services, every producer/consumer pair.
func TestCheckFleet(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fleet []craigctl.Windows
		want  []craigctl.Violation
	}{
		{"defaults", []craigctl.Windows{w("rules", 30, 31, 30), w("security", 30, 31, 30)}, nil},
		{"a consumer's inbox shorter than a producer's outbox + 1", []craigctl.Windows{w("rules", 40, 41, 30), w("security", 30, 31, 30)},
			[]craigctl.Violation{{Rule: craigctl.RuleInboxOutlivesOutbox, Producer: "rules", Consumer: "security",
				Detail: "security event_inbox_retention_days=31 < rules event_outbox_retention_days=40 + 1"}}},
		{"inbox exactly outbox is one day short", []craigctl.Windows{w("rules", 31, 32, 30), w("security", 30, 31, 30)},
			[]craigctl.Violation{{Rule: craigctl.RuleInboxOutlivesOutbox, Producer: "rules", Consumer: "security",
				Detail: "security event_inbox_retention_days=31 < rules event_outbox_retention_days=31 + 1"}}},
		{"a replay clamp past a consumer's inbox", []craigctl.Windows{w("rules", 30, 60, 45), w("security", 30, 31, 30)},
			[]craigctl.Violation{{Rule: craigctl.RuleReplayWithinInbox, Producer: "rules", Consumer: "security",
				Detail: "rules replay_max_age_days=45 > security event_inbox_retention_days=31 - 1"}}},
		{"a consumer keeping its inbox forever", []craigctl.Windows{w("rules", 400, 401, 400), w("security", 30, 0, 30)}, nil},
		{"a producer keeping its outbox forever", []craigctl.Windows{w("rules", 0, 31, 30), w("security", 30, 31, 30)}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := craigctl.CheckFleet(tc.fleet)
			if len(tc.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestFleetCheckCommand: windows read from every service's GET
// /admin/retention with its token; a violation exits 1 with the JSON a
// script reads; a bad fleet file is a usage error; a service answering as
// another fails.
func TestFleetCheckCommand(t *testing.T) {
	t.Parallel()
	retention := func(svc string, inbox int) http.HandlerFunc {
		return answer(200, fmt.Sprintf(`{"service":%q,"event_outbox_retention_days":30,"event_inbox_retention_days":%d,"replay_max_age_days":30,"tables":{}}`, svc, inbox))
	}
	rules := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("rules", 31)})
	security := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("security", 30)})
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "security.token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken+"-security\n"), 0o600))
	fleet := filepath.Join(dir, "fleet.yaml")
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - name: rules\n    url: %s\n  - name: security\n    url: %s\n    token_file: %s\n",
		rules.srv.URL, security.srv.URL, tokenFile), 0o600))

	r := run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "fleet", "check", "--config", fleet, "--json")
	require.Equal(t, craigctl.ExitFailed, r.code, r.errOut)
	var rep struct {
		OK         bool                 `json:"ok"`
		Violations []craigctl.Violation `json:"violations"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	require.False(t, rep.OK)
	require.Len(t, rep.Violations, 4, "security's inbox of 30 is one day short of both outboxes and under both replay clamps")
	require.Equal(t, "Bearer "+testToken, rules.seen()[0].Auth)
	require.Equal(t, "Bearer "+testToken+"-security", security.seen()[0].Auth, "a service's own token_file wins")

	ok := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("security", 31)})
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n", rules.srv.URL, ok.srv.URL), 0o600))
	r = run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "ok: 2 service(s)")

	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: security, url: %s}\n", rules.srv.URL), 0o600))
	r = run(t, "", false, nil, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.errOut, `answers as service "rules"`)

	for name, body := range map[string]string{
		"unknown key": "services:\n  - {name: rules, url: http://h, urll: x}\n",
		"no services": "services: []\n",
		"bad url":     "services:\n  - {name: rules, url: 'h:1'}\n",
		"twice":       "services:\n  - {name: rules, url: 'http://h'}\n  - {name: rules, url: 'http://h'}\n",
		"not yaml":    "services: [",
	} {
		require.NoError(t, os.WriteFile(fleet, []byte(body), 0o600))
		r = run(t, "", false, nil, "fleet", "check", "--config", fleet)
		require.Equal(t, craigctl.ExitUsage, r.code, name)
	}
	down := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": answer(401, `{"error":"invalid_token"}`)})
	require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n", down.srv.URL), 0o600))
	r = run(t, "", false, nil, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitAuth, r.code)
}
