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

// TestFleetCheckComparesScheduleVersions: two archiving services with
// different versions in force (or one with none) are a violation naming
// both; the same version is none; a service whose schedule API is not
// served is left out.
func TestFleetCheckComparesScheduleVersions(t *testing.T) {
	t.Parallel()
	retention := func(svc string) http.HandlerFunc {
		return answer(200, fmt.Sprintf(`{"service":%q,"event_outbox_retention_days":30,"event_inbox_retention_days":31,"replay_max_age_days":30,"tables":{},`+
			`"archive":{"enabled":true,"hot_window_days":90,"retention_days":{},"subject_key_fingerprint":"0011223344556677"}}`, svc))
	}
	inForce := func(v string) http.HandlerFunc {
		if v == "" {
			return answer(200, `{"series":["audit_log"],"in_force":null,"history":[]}`)
		}
		return answer(200, `{"series":["audit_log"],"in_force":{"version":"`+v+`"},"history":[]}`)
	}
	service := func(svc, v string) *fake {
		return newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention(svc), "GET /admin/archive/holds": answer(200, `{"holds":[]}`),
			"GET /admin/retention/schedule": inForce(v)})
	}
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	check := func(a, b *fake) result {
		t.Helper()
		require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - {name: rules, url: %s}\n  - {name: security, url: %s}\n",
			a.srv.URL, b.srv.URL), 0o600))
		return run(t, "", false, map[string]string{"CRAIG_TOKEN": testToken}, "fleet", "check", "--config", fleet)
	}
	r := check(service("rules", "2026-1"), service("security", "2026-1"))
	require.Equal(t, craigctl.ExitOK, r.code, r.out+r.errOut)
	require.NotContains(t, r.out, "VIOLATION")

	r = check(service("rules", "2026-1"), service("security", "2025-4"))
	require.Equal(t, craigctl.ExitFailed, r.code, r.out+r.errOut)
	require.Contains(t, r.out, "VIOLATION schedule_version_same")
	require.Contains(t, r.out, `rules has schedule version "2026-1" in force and security has "2025-4"`)
	require.Equal(t, 1, strings.Count(r.out, "VIOLATION"), r.out)

	r = check(service("rules", "2026-1"), service("security", ""))
	require.Equal(t, craigctl.ExitFailed, r.code)
	require.Contains(t, r.out, "security has none")

	unserved := newFake(t, map[string]http.HandlerFunc{"GET /admin/retention": retention("security"), "GET /admin/archive/holds": answer(200, `{"holds":[]}`)})
	r = check(service("rules", "2026-1"), unserved)
	require.Equal(t, craigctl.ExitOK, r.code, r.out+r.errOut)
}
