package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/kernel/vacuumwatch"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/financial"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// overrunAge is the age of the oldest overrunning row of every seed below.
const overrunAge = 40 * 24 * time.Hour

// ageTolerance absorbs the seconds between seeding and checking.
const ageTolerance = time.Minute

// seedOverrunTransport overruns both transport invariants (outbox past
// 30 + 2 d, inbox past 31 + 2 d) and adds rows that must not count: a pending
// outbox row of any age (never swept, so never overdue), and rows past their
// window but within the grace.
const seedOverrunTransport = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
  ('overrun',      '{}', now() - interval '40 days', now() - interval '40 days'),
  ('overrun',      '{}', now() - interval '40 days', now() - interval '40 days'),
  ('overrun',      '{}', now() - interval '36 days', now() - interval '36 days'),
  ('within_grace', '{}', now() - interval '31 days', now() - interval '31 days'),
  ('fresh',        '{}', now() - interval '1 day',   now() - interval '1 day');
INSERT INTO event_outbox (event_type, payload, created_at, last_error) VALUES
  ('pending', '{}', now() - interval '400 days', 'broker refused'),
  ('pending', '{}', now() - interval '40 days',  NULL);
INSERT INTO event_inbox (event_id, event_type, received_at) VALUES
  (gen_random_uuid(), 'overrun',      now() - interval '40 days'),
  (gen_random_uuid(), 'overrun',      now() - interval '34 days'),
  (gen_random_uuid(), 'within_grace', now() - interval '32 days'),
  (gen_random_uuid(), 'fresh',        now() - interval '10 days');
`

// seedOverrunSendJobs overruns the send-jobs invariant with terminal jobs
// and adds jobs that never count: dead-lettered (never swept), pending and
// in-flight (no completion), and a sent job within the grace.
const seedOverrunSendJobs = `
INSERT INTO exchange_send_jobs (status, created_at, completed_at) VALUES
  ('sent',        now() - interval '41 days', now() - interval '40 days'),
  ('failed',      now() - interval '41 days', now() - interval '40 days'),
  ('sent',        now() - interval '36 days', now() - interval '35 days'),
  ('dead_letter', now() - interval '41 days', now() - interval '40 days'),
  ('sent',        now() - interval '31 days', now() - interval '31 days'),
  ('sent',        now() - interval '2 days',  now() - interval '1 day');
INSERT INTO exchange_send_jobs (status, created_at) VALUES
  ('pending',   now() - interval '40 days'),
  ('in_flight', now() - interval '40 days');
`

// seedOverrunReconcile overruns the reconcile invariant with settled rows
// and adds rows that never count: a dead-lettered row (never swept), an
// unprocessed one and a settled one within the grace.
const seedOverrunReconcile = `
INSERT INTO subsidy_reconcile_queue (created_at, processed_at, dead_lettered_at) VALUES
  (now() - interval '41 days', now() - interval '40 days', NULL),
  (now() - interval '38 days', now() - interval '37 days', NULL),
  (now() - interval '41 days', now() - interval '40 days', now() - interval '40 days'),
  (now() - interval '31 days', now() - interval '31 days', NULL),
  (now() - interval '41 days', NULL,                       NULL);
`

// wantInvariant is one line of the expected `invariants --json` output.
type wantInvariant struct {
	name       string
	violations int64
}

type serviceCase struct {
	service string
	run     runner
	// names are the service's invariants as its spec derives them, in
	// report order (an overrun per swept table, then a future-dated one).
	names []string
	seed  []string
	// want are the invariants the seeds overrun; every other one of names
	// must report none.
	want []wantInvariant
	// kept are the rows no sweep may delete, as table → count after a sweep.
	kept map[string]int64
	// swept are the service's swept tables in report order, as its spec
	// derives them (a table added since is among them, unseeded).
	swept []string
}

// sweptTables lists a spec's swept tables in report order.
func sweptTables[T any](spec app.Spec[T]) []string {
	var out []string
	for _, p := range sweep.Policies(app.Groups(spec, spec.Defaults)) {
		out = append(out, p.Label())
	}
	return out
}

func serviceCases() []serviceCase {
	transport := []wantInvariant{{"outbox_retention_overrun", 3}, {"inbox_retention_overrun", 2}}
	keptTransport := map[string]int64{
		"event_outbox": 3, // two pending + one fresh
		"event_inbox":  1,
	}
	with := func(m map[string]int64, table string, n int64) map[string]int64 {
		out := map[string]int64{table: n}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return []serviceCase{
		{
			service: exchange.Name, run: runnerOf(exchange.Spec()), names: names(app.InvariantSpecs(exchange.Spec(), exchange.DefaultSettings())), swept: sweptTables(exchange.Spec()),
			seed: []string{seedOverrunTransport, seedOverrunSendJobs},
			want: append(transport[:2:2], wantInvariant{"send_jobs_retention_overrun", 3}),
			// dead_letter, fresh sent, pending, in_flight
			kept: with(keptTransport, exchange.SendJobsTable, 4),
		},
		{
			service: financial.Name, run: runnerOf(financial.Spec()), names: names(app.InvariantSpecs(financial.Spec(), financial.DefaultSettings())), swept: sweptTables(financial.Spec()),
			seed: []string{seedOverrunTransport, seedOverrunReconcile},
			want: append(transport[:2:2], wantInvariant{"reconcile_settled_retention_overrun", 2}),
			// dead-lettered, unprocessed
			kept: with(keptTransport, financial.ReconcileTable, 2),
		},
		{service: rules.Name, run: runnerOf(rules.Spec()), names: names(app.InvariantSpecs(rules.Spec(), rules.DefaultSettings())), swept: sweptTables(rules.Spec()),
			seed: []string{seedOverrunTransport}, want: transport, kept: keptTransport},
		{service: security.Name, run: runnerOf(security.Spec()), names: names(app.InvariantSpecs(security.Spec(), security.DefaultSettings())), swept: sweptTables(security.Spec()),
			seed: []string{seedOverrunTransport}, want: transport, kept: keptTransport},
	}
}

// invariantsJSON is the documented shape of `invariants --json`.
type invariantJSON struct {
	Name             string   `json:"name"`
	Table            string   `json:"table"`
	Violations       int64    `json:"violations"`
	OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
	ThresholdDays    int      `json:"threshold_days"`
	Disabled         bool     `json:"disabled"`
}

type invariantsJSON struct {
	Invariants []invariantJSON `json:"invariants"`
}

// decodeInvariants requires stdout to be exactly one JSON object in which
// every invariant carries the documented keys, and decodes it.
func decodeInvariants(t *testing.T, stdout []byte) invariantsJSON {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(stdout))
	var raw map[string][]map[string]any
	require.NoError(t, dec.Decode(&raw), "stdout: %s", stdout)
	require.False(t, dec.More(), "stdout holds exactly one JSON object")
	require.Len(t, raw, 1, "the object has one key, invariants")
	for _, inv := range raw["invariants"] {
		for _, key := range []string{"name", "violations", "oldest_age_seconds"} {
			require.Contains(t, inv, key)
		}
	}
	var rep invariantsJSON
	require.NoError(t, json.Unmarshal(stdout, &rep))
	return rep
}

// prepare migrates an empty scratch database with the service binary and
// seeds it; it returns the database and the binary's environment.
func prepare(t *testing.T, tc serviceCase, extraEnv ...string) (*kerneltest.DB, []string) {
	t.Helper()
	db := kerneltest.NewDB(t) // empty: the binary's migrate builds it
	env := append([]string{settings.EnvVar(tc.service, "database_url") + "=" + db.URL}, extraEnv...)
	var out, errOut bytes.Buffer
	require.Equal(t, app.ExitOK, tc.run(context.Background(), []string{"migrate"}, &out, &errOut, env), errOut.String())
	for _, s := range tc.seed {
		db.Exec(t, s)
	}
	return db, env
}

func runCmd(t *testing.T, run runner, env []string, args ...string) (int, []byte, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut, env)
	return code, out.Bytes(), errOut.String()
}

// TestInvariantsRedHarness: every invariant of every service fires on
// seeded overrunning rows (and only on them), the gate fails, one sweep
// clears every invariant, and the gate passes.
func TestInvariantsRedHarness(t *testing.T) {
	t.Parallel()
	for _, tc := range serviceCases() {
		t.Run(tc.service, func(t *testing.T) {
			t.Parallel()
			db, env := prepare(t, tc)

			// Red: the gate fails and names every overrun exactly.
			code, out, errOut := runCmd(t, tc.run, env, "invariants", "--gate", "--json")
			require.Equal(t, app.ExitFail, code, errOut)
			rep := decodeInvariants(t, out)
			got := tc.byName(t, rep.Invariants)
			for _, w := range tc.want {
				inv := got[w.name]
				require.Equal(t, w.violations, inv.Violations, w.name)
				require.NotNil(t, inv.OldestAgeSeconds, w.name)
				require.InDelta(t, overrunAge.Seconds(), *inv.OldestAgeSeconds, ageTolerance.Seconds(), w.name)
				require.False(t, inv.Disabled)
				delete(got, w.name)
			}
			for name, inv := range got {
				require.Zero(t, inv.Violations, "%s: the seeds overrun nothing else", name)
			}

			// Without --gate the report is the same and the exit code 0:
			// report-only unless asked to gate.
			code, out2, errOut := runCmd(t, tc.run, env, "invariants", "--json")
			require.Equal(t, app.ExitOK, code, errOut)
			rep2 := decodeInvariants(t, out2)
			for i := range rep.Invariants {
				require.Equal(t, rep.Invariants[i].Violations, rep2.Invariants[i].Violations)
			}

			// The table form prints every invariant, its count and age.
			code, text, errOut := runCmd(t, tc.run, env, "invariants")
			require.Equal(t, app.ExitOK, code, errOut)
			lines := strings.Split(strings.TrimSpace(string(text)), "\n")
			require.Len(t, lines, 1+len(tc.names), string(text))
			require.Equal(t, []string{"INVARIANT", "TABLE", "VIOLATIONS", "OLDEST", "OFFENDING", "THRESHOLD"}, strings.Fields(lines[0]))
			for i, name := range tc.names {
				require.Equal(t, name, strings.Fields(lines[i+1])[0])
			}
			for _, w := range tc.want {
				f := strings.Fields(lines[1+slices.Index(tc.names, w.name)])
				require.Equal(t, fmt.Sprint(w.violations), f[2], w.name)
				require.Equal(t, "40d00h", f[3], w.name)
			}

			// Watchdogs never delete.
			require.Equal(t, int64(7), db.Count(t, "SELECT count(*) FROM event_outbox"))

			// One sweep clears every invariant.
			code, _, errOut = runCmd(t, tc.run, env, "sweep", "--once")
			require.Equal(t, app.ExitOK, code, errOut)
			code, out, errOut = runCmd(t, tc.run, env, "invariants", "--gate", "--json")
			require.Equal(t, app.ExitOK, code, errOut)
			for name, inv := range tc.byName(t, decodeInvariants(t, out).Invariants) {
				require.Zero(t, inv.Violations, name)
				require.Nil(t, inv.OldestAgeSeconds, "%s: null when nothing overruns", name)
			}
			var raw map[string][]map[string]any
			require.NoError(t, json.Unmarshal(out, &raw))
			for _, inv := range raw["invariants"] {
				require.Nil(t, inv["oldest_age_seconds"])
			}
			code, _, errOut = runCmd(t, tc.run, env, "invariants", "--gate")
			require.Equal(t, app.ExitOK, code, errOut)

			// What no sweep may delete is still there.
			for table, n := range tc.kept {
				require.Equal(t, n, db.Count(t, "SELECT count(*) FROM "+table), table)
			}
		})
	}
}

// TestInvariantsDisabledWindow: a table whose sweep is off is reported
// disabled and never counted, whatever its rows' age; the other tables of
// the service are still gated.
func TestInvariantsDisabledWindow(t *testing.T) {
	t.Parallel()
	cases := serviceCases()

	t.Run("OneTable", func(t *testing.T) {
		t.Parallel()
		tc := caseOf(t, cases, exchange.Name)
		_, env := prepare(t, tc, settings.EnvVar(exchange.Name, "exchange_send_jobs_retention_days")+"=0")
		code, out, errOut := runCmd(t, tc.run, env, "invariants", "--gate", "--json")
		require.Equal(t, app.ExitFail, code, errOut)
		got := tc.byName(t, decodeInvariants(t, out).Invariants)
		jobs := got["send_jobs_retention_overrun"]
		require.True(t, jobs.Disabled)
		require.Zero(t, jobs.Violations)
		require.Nil(t, jobs.OldestAgeSeconds)
		require.Equal(t, int64(3), got["outbox_retention_overrun"].Violations)
		offByDefault := map[string]bool{} // the outbox's dead letters: kept unless set
		for _, s := range app.InvariantSpecs(exchange.Spec(), exchange.DefaultSettings()) {
			offByDefault[s.Name] = s.Disabled()
		}
		for name, inv := range got {
			require.Equal(t, inv.Table == jobs.Table || offByDefault[name], inv.Disabled, "%s: only the watchdogs of the table whose sweep is off are disabled", name)
		}

		code, text, errOut := runCmd(t, tc.run, env, "invariants")
		require.Equal(t, app.ExitOK, code, errOut)
		require.Regexp(t, `send_jobs_retention_overrun\s+exchange_send_jobs\s+0\s+-\s+disabled`, string(text))
	})

	t.Run("EveryTable", func(t *testing.T) {
		t.Parallel()
		tc := caseOf(t, cases, rules.Name)
		_, env := prepare(t, tc,
			settings.EnvVar(rules.Name, "event_outbox_retention_days")+"=0",
			settings.EnvVar(rules.Name, "event_inbox_retention_days")+"=0")
		code, out, errOut := runCmd(t, tc.run, env, "invariants", "--gate", "--json")
		require.Equal(t, app.ExitOK, code, errOut)
		for _, inv := range decodeInvariants(t, out).Invariants {
			require.Zero(t, inv.Violations, inv.Name)
			if slices.Contains(vacuumwatch.InvariantNames(), inv.Name) {
				require.False(t, inv.Disabled, "the database's vacuum watchdog is no table's: it stays on")
				continue
			}
			require.True(t, inv.Disabled, inv.Name)
		}
	})
}

// TestInvariantsErrorExitsTwo: when the check cannot run, every form of the
// command exits 2, the gate's "could not tell", distinct from 1 "violated".
func TestInvariantsErrorExitsTwo(t *testing.T) {
	t.Parallel()
	for _, tc := range serviceCases() {
		t.Run(tc.service, func(t *testing.T) {
			t.Parallel()
			env := []string{settings.EnvVar(tc.service, "database_url") + "=postgres://postgres@127.0.0.1:1/x?connect_timeout=1"}
			for _, args := range [][]string{
				{"invariants", "--gate", "--json"},
				{"invariants", "--gate"},
				{"invariants", "--json"},
				{"invariants"},
			} {
				code, out, errOut := runCmd(t, tc.run, env, args...)
				require.Equal(t, app.ExitUsage, code, "%v", args)
				require.Equal(t, 2, code)
				require.Empty(t, out, "%v: no report when the check could not run", args)
				require.Contains(t, errOut, "invariants failed")
				require.Contains(t, errOut, "unreachable")
			}
		})
	}
}

// names are the names of a service's invariant specs, in order, then the
// vacuum watchdog's (every service reports them last).
func names(specs []invariants.Spec) []string {
	out := make([]string, len(specs), len(specs)+len(vacuumwatch.InvariantNames()))
	for i, s := range specs {
		out[i] = s.Name
	}
	return append(out, vacuumwatch.InvariantNames()...)
}

// byName requires a report to list exactly the service's invariants, in
// its spec's order, and indexes them by name.
func (tc serviceCase) byName(t *testing.T, rs []invariantJSON) map[string]invariantJSON {
	t.Helper()
	got := make([]string, len(rs))
	out := make(map[string]invariantJSON, len(rs))
	for i, r := range rs {
		got[i] = r.Name
		out[r.Name] = r
	}
	require.Equal(t, tc.names, got, "the report lists every invariant the service's spec derives, in order")
	return out
}

// caseOf picks a service's case by name.
func caseOf(t *testing.T, cases []serviceCase, service string) serviceCase {
	t.Helper()
	i := slices.IndexFunc(cases, func(c serviceCase) bool { return c.service == service })
	require.GreaterOrEqual(t, i, 0, service)
	return cases[i]
}
