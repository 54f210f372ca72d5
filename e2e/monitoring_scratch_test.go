package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/vacuumwatch"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// monitoringAssets are the files whose PromQL an operator loads.
var monitoringAssets = []string{
	"../deploy/prometheus/retention-alerts.yml",
	"../deploy/grafana/retention-dashboard.json",
}

// assetMetric is a metric name in the assets' PromQL: the families the
// services export (and the process collector's).
var assetMetric = regexp.MustCompile(`\b((?:retention|archive|outbox|event|events|admin|process)_[a-z0-9_]+)\b`)

// typeLine is a family's # TYPE line in a scrape.
var typeLine = regexp.MustCompile(`(?m)^# TYPE ([a-z_:][a-z0-9_:]*) `)

// afterFirstCycle are the gauges a service has no value for until its first
// sweep cycle: the backlog age (0 would claim "no backlog"), the watchdogs,
// exported only by the replica that swept, and the vacuum readings of the
// swept tables and of the server's slots.
var afterFirstCycle = map[string]bool{
	"retention_oldest_eligible_age_seconds": true,
	"retention_invariant_violations":        true,
	"retention_dead_tuples":                 true,
	"retention_slot_retained_wal_bytes":     true, // and only for a server that has slots
	// the orphans a verification counted: none counted yet is no series
	// (a 0 the first count would seem to grow from fires ArchiveOrphansGrowing)
	"archive_orphan_objects": true,
	// the archive backlog: read after each archive pass (0 would claim "no backlog")
	"archive_backlog_oldest_age_seconds": true,
	// the unparsed subjects: counted after each archive pass (0 would claim "none")
	"retention_subject_unparsed_rows": true,
	// what the records schedule makes due: no series until a schedule is
	// in force and the due listing ran (a 0 would claim "nothing is due")
	"retention_disposition_due_rows":        true,
	"retention_disposition_due_oldest_days": true,
	// the rows batches destroyed: labelled by item, no series before the
	// first batch is executed under a schedule
	"retention_disposition_executed_rows_total": true,
}

// TestFreshServeExportsEveryMonitoredSeries boots rules' and security's
// serve (archiver on, admin API on) and scrapes them at once: every metric
// the alert rules and the dashboard read is in a scrape, and the counters
// alerts take increase() of already hold a 0 series for every table and
// reason the service knows, so the first event fires its alert. promtool
// (when present; under CI=true it must be) lints both scrapes.
func TestFreshServeExportsEveryMonitoredSeries(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL, RabbitMQ and the S3 store")
	w := newFleetWorld(t)
	secret := "monitoring-test-secret-of-at-least-32-bytes"
	authEnv := func(service string) string { return settings.EnvVar(service, "auth.jwt_hs256_secret") + "=" + secret }
	sec := serve(t, runnerOf(security.Spec()), w.env("security", w.secDB.URL, "security-1", authEnv("security")))
	rul := serve(t, runnerOf(rules.Spec()), w.env("rules", w.rulesDB.URL, "rules-1", authEnv("rules")))

	scrapes := map[string]string{}
	for name, s := range map[string]*served{"security": sec, "rules": rul} {
		require.Eventually(t, func() bool {
			body, ok := scrape(s.addr)
			scrapes[name] = body
			// The archiver's and the fleet's series come once they booted.
			return ok && strings.Contains(body, "archive_last_success_timestamp_seconds") &&
				(name != "security" || strings.Contains(body, "archive_event_refused_total"))
		}, fleetDeadline, 100*time.Millisecond, "%s serves its metrics (stderr: %s)", name, s.stderr.String())
	}
	families := map[string]bool{}
	for _, body := range scrapes {
		for _, m := range typeLine.FindAllStringSubmatch(body, -1) {
			families[m[1]] = true
		}
	}
	for _, asset := range monitoringAssets {
		for _, m := range assetMetric.FindAllStringSubmatch(exprsOf(t, asset), -1) {
			name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m[1], "_bucket"), "_sum"), "_count")
			if afterFirstCycle[name] {
				continue
			}
			require.True(t, families[name], "%s reads %s, which no fresh serve exports", filepath.Base(asset), m[1])
		}
	}
	for _, series := range []string{
		`retention_prune_capped_total{table="event_outbox"} 0`,
		`retention_prune_failures_total{table="event_inbox"} 0`,
		`retention_prune_batch_reduced_total{table="event_outbox"} 0`,
		`retention_prune_lock_skipped_total{group="transport"} 0`,
		`archive_failures_total{kind="store",table="rule_evaluations"} 0`,
		`archive_verify_failures_total{kind="sha256"} 0`,
		`admin_auth_failures_total{reason="expired"} 0`,
		`archive_purge_refused_total{reason="store_error"} 0`,
		`retention_vacuum_horizon_age_xids{holder="prepared"} 0`,
	} {
		require.True(t, strings.Contains(scrapes["rules"], "\n"+series+"\n"), "rules exports %s from boot", series)
	}
	for _, series := range []string{
		`archive_event_refused_total{reason="signature"} 0`,
		`archive_ledger_divergence_total{source_service="craig-rules"} 0`,
		`archive_records_booked_total{source_service="craig-rules"} 0`,
		`archive_failures_total{kind="db",table="dead_letter_audit"} 0`,
	} {
		require.True(t, strings.Contains(scrapes["security"], "\n"+series+"\n"), "security exports %s from boot", series)
	}
	lintScrapes(t, scrapes)
}

// exprsOf is the PromQL of an asset: the rules' expr fields, the
// dashboard's targets' expr fields.
func exprsOf(t *testing.T, asset string) string {
	t.Helper()
	raw, err := os.ReadFile(asset)
	require.NoError(t, err)
	if strings.HasSuffix(asset, ".json") {
		var b strings.Builder
		for _, m := range regexp.MustCompile(`"expr":\s*"((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(string(raw), -1) {
			b.WriteString(m[1] + "\n")
		}
		return b.String()
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	var b strings.Builder
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			b.WriteString(r.Expr + "\n")
		}
	}
	return b.String()
}

// scrape reads a service's /metrics.
func scrape(addr string) (string, bool) {
	resp, err := http.Get("http://" + addr + "/metrics") //nolint:noctx // a loopback test server
	if err != nil {
		return "", false
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return "\n" + string(b), err == nil && resp.StatusCode == http.StatusOK
}

// lintScrapes runs `promtool check metrics` on each scrape.
func lintScrapes(t *testing.T, scrapes map[string]string) {
	t.Helper()
	promtool := kerneltest.Promtool(t)
	for name, body := range scrapes {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(strings.TrimPrefix(body, "\n"))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool check metrics on %s's scrape:\n%s", name, out)
	}
}

// TestVacuumWatchdogInvariant: a REPEATABLE READ session holding its
// snapshot longer than vacuum_horizon_max_held makes `invariants --gate`
// fail naming vacuum_horizon_held; rolled back, the gate passes again.
func TestVacuumWatchdogInvariant(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL")
	ctx := context.Background()
	db := serviceDB(t, exchange.Name)
	env := []string{
		settings.EnvVar(exchange.Name, "database_url") + "=" + db.URL,
		settings.EnvVar(exchange.Name, "vacuum_horizon_max_held") + "=1ms",
	}
	holder, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM event_outbox").Scan(&n)) // takes the snapshot
	time.Sleep(20 * time.Millisecond)                                                  // held past the 1 ms bound

	code, out, errOut := runCmd(t, runnerOf(exchange.Spec()), env, "invariants", "--gate", "--json")
	require.Equal(t, app.ExitFail, code, errOut)
	all := decodeInvariants(t, out).Invariants
	held := all[len(all)-len(vacuumwatch.InvariantNames())]
	require.Equal(t, vacuumwatch.InvariantName, held.Name)
	require.Equal(t, int64(1), held.Violations, string(out))

	// The sweep's report says so too: what it deleted stays on disk.
	code, out, errOut = runCmd(t, runnerOf(exchange.Spec()), env, "sweep", "--once", "--json")
	require.Equal(t, app.ExitOK, code, errOut)
	var rep struct {
		Tables []json.RawMessage `json:"tables"`
		Vacuum struct {
			Findings   []vacuumwatch.Finding `json:"findings"`
			DeadTuples map[string]int64      `json:"dead_tuples"`
		} `json:"vacuum"`
	}
	require.NoError(t, json.Unmarshal(out, &rep), string(out))
	require.NotEmpty(t, rep.Tables, "the cycle's report is still there")
	require.Len(t, rep.Vacuum.Findings, 1, string(out))
	require.Equal(t, vacuumwatch.FindingHorizonHeld, rep.Vacuum.Findings[0].Kind)
	require.Equal(t, vacuumwatch.HolderBackend, rep.Vacuum.Findings[0].Holder)
	require.Contains(t, rep.Vacuum.DeadTuples, "event_outbox", "each swept table's dead tuples")
	code, text, errOut := runCmd(t, runnerOf(exchange.Spec()), env, "sweep", "--once")
	require.Equal(t, app.ExitOK, code, errOut)
	require.Contains(t, string(text), "VACUUM cannot keep up: backend ")

	require.NoError(t, tx.Rollback(ctx))
	code, out, errOut = runCmd(t, runnerOf(exchange.Spec()), env, "invariants", "--gate", "--json")
	require.Equal(t, app.ExitOK, code, "released, nothing holds the horizon: %s %s", out, errOut)
	code, text, errOut = runCmd(t, runnerOf(exchange.Spec()), env, "sweep", "--once")
	require.Equal(t, app.ExitOK, code, errOut)
	require.Contains(t, string(text), "vacuum: nothing holds VACUUM back")
}
