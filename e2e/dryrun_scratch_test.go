package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/financial"
)

// tableCounts counts the rows of every table of the public schema (the
// swept tables, the must-keep ones and goose's version tables).
func tableCounts(t *testing.T, db *kerneltest.DB) map[string]int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	out := map[string]int64{}
	for _, table := range tables {
		out[table] = db.Count(t, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize())
	}
	return out
}

// wantEligible is, per swept table, how many rows of the red-harness seeds
// (seedOverrun*) are past their window: the overrunning rows plus those
// within the grace. The oldest of each is overrunAge old.
var wantEligible = map[string]int64{
	sweep.OutboxTable:        4,
	sweep.InboxTable:         3,
	exchange.SendJobsTable:   4,
	financial.ReconcileTable: 3,
}

// dryRunJSON decodes the tables of `sweep --once --dry-run --json` as raw
// objects, after checking the top-level shape.
func dryRunJSON(t *testing.T, stdout []byte) []map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(stdout))
	var raw map[string]any
	require.NoError(t, dec.Decode(&raw), "stdout: %s", stdout)
	require.False(t, dec.More(), "stdout holds exactly one JSON object")
	require.Equal(t, true, raw["dry_run"])
	require.Equal(t, true, raw["lock_acquired"])
	var rep struct {
		Tables []map[string]any `json:"tables"`
	}
	require.NoError(t, json.Unmarshal(stdout, &rep))
	return rep.Tables
}

// TestSweepDryRun: for every service, `sweep --once --dry-run --json`
// deletes nothing, reports each table's eligible rows, oldest eligible age
// and the batches a real run takes, and a real run then deletes exactly
// what it said in exactly that many batches.
func TestSweepDryRun(t *testing.T) {
	t.Parallel()
	for _, tc := range serviceCases() {
		t.Run(tc.service, func(t *testing.T) {
			t.Parallel()
			// Batches of 2: every table takes more than one. A dry run plans
			// full batches; yielding to the writes of the tests running
			// beside this one would split them, so it is off here
			// (kernel/prune TestPruneYieldsToWriters covers it).
			// The outbox's dead letters, kept by default, are swept at 30
			// days here so that every policy has a line to check.
			db, env := prepare(t, tc, settings.EnvVar(tc.service, "prune_batch_size")+"=2",
				settings.EnvVar(tc.service, "prune_yield_to_writers")+"=false",
				settings.EnvVar(tc.service, settings.OutboxDeadLetterRetentionKey)+"=30")
			before := tableCounts(t, db)

			code, out, errOut := runCmd(t, tc.run, env, "sweep", "--once", "--dry-run", "--json")
			require.Equal(t, app.ExitOK, code, errOut)
			require.Equal(t, before, tableCounts(t, db), "a dry run leaves every row of every table in place")

			dry := dryRunJSON(t, out)
			require.Len(t, dry, len(tc.swept), "one entry per swept table")
			for i, tr := range dry {
				table := tr["table"].(string)
				require.Equal(t, tc.swept[i], table)
				eligible, ok := wantEligible[table]
				if !ok { // a table registered since: not seeded, nothing to delete
					require.InDelta(t, 0, tr["eligible"], 0, table)
					continue
				}
				require.InDelta(t, 0, tr["deleted"], 0, table)
				require.InDelta(t, eligible, tr["eligible"], 0, table)
				require.InDelta(t, overrunAge.Seconds(), tr["oldest_eligible_age_seconds"], ageTolerance.Seconds(),
					"%s: the oldest eligible row (an older pending row is not eligible)", table)
				require.InDelta(t, eligible/2+1, tr["batches"], 0, "%s: full batches of 2 and a short one", table)
				require.Equal(t, false, tr["capped"], table)
				require.NotContains(t, tr, "skipped")
				require.NotContains(t, tr, "error")
			}

			// The text form says it is a dry run.
			code, text, errOut := runCmd(t, tc.run, env, "sweep", "--once", "--dry-run")
			require.Equal(t, app.ExitOK, code, errOut)
			require.Contains(t, string(text), "dry run: nothing deleted")
			require.Equal(t, before, tableCounts(t, db))

			// The real run does what the dry run said.
			code, out, errOut = runCmd(t, tc.run, env, "sweep", "--once", "--json")
			require.Equal(t, app.ExitOK, code, errOut)
			var ran sweep.Report
			require.NoError(t, json.Unmarshal(out, &ran))
			require.False(t, ran.DryRun)
			require.Len(t, ran.Tables, len(dry))
			for i, r := range ran.Tables {
				d := dry[i]
				require.Equal(t, d["table"], r.Table)
				require.InDelta(t, d["eligible"], r.Deleted, 0, "%s: deleted = dry-run eligible", r.Table)
				require.InDelta(t, d["batches"], r.Batches, 0, "%s: batches = dry-run batches", r.Table)
				require.Equal(t, d["capped"], r.Capped, r.Table)
				if r.Table == sweep.OutboxDeadLetters {
					continue // a label, not a table: event_outbox's second policy
				}
				require.Equal(t, before[r.Table]-r.Deleted, db.Count(t, "SELECT count(*) FROM "+r.Table))
			}

			// Now nothing is eligible: null age, one (empty) batch.
			code, out, errOut = runCmd(t, tc.run, env, "sweep", "--once", "--dry-run", "--json")
			require.Equal(t, app.ExitOK, code, errOut)
			for _, tr := range dryRunJSON(t, out) {
				require.InDelta(t, 0, tr["eligible"], 0)
				require.Contains(t, tr, "oldest_eligible_age_seconds")
				require.Nil(t, tr["oldest_eligible_age_seconds"])
				require.InDelta(t, 1, tr["batches"], 0)
			}
		})
	}
}

// TestSweepDryRunDisabledTable: a table whose window is 0 is reported
// "skipped": "disabled", without eligible rows or age.
func TestSweepDryRunDisabledTable(t *testing.T) {
	t.Parallel()
	for _, tc := range serviceCases() {
		t.Run(tc.service, func(t *testing.T) {
			t.Parallel()
			db, env := prepare(t, tc, settings.EnvVar(tc.service, "event_inbox_retention_days")+"=0")
			before := tableCounts(t, db)
			code, out, errOut := runCmd(t, tc.run, env, "sweep", "--once", "--dry-run", "--json")
			require.Equal(t, app.ExitOK, code, errOut)
			require.Equal(t, before, tableCounts(t, db))
			dry := dryRunJSON(t, out)
			inbox := dry[1]
			require.Equal(t, sweep.InboxTable, inbox["table"])
			require.Equal(t, "disabled", inbox["skipped"])
			require.NotContains(t, inbox, "eligible")
			require.NotContains(t, inbox, "oldest_eligible_age_seconds")
			require.InDelta(t, 0, inbox["deleted"], 0)
			require.InDelta(t, 0, inbox["batches"], 0)
			require.InDelta(t, wantEligible[sweep.OutboxTable], dry[0]["eligible"], 0, "the other tables are still planned")
		})
	}
}

func TestSweepDryRunTextHeader(t *testing.T) {
	t.Parallel()
	tc := serviceCases()[0]
	_, env := prepare(t, tc)
	code, out, errOut := runCmd(t, tc.run, env, "sweep", "--once", "--dry-run")
	require.Equal(t, app.ExitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Equal(t, "dry run: nothing deleted; leases free now: true", strings.TrimSpace(lines[0]))
	require.Equal(t, []string{"TABLE", "GROUP", "ELIGIBLE", "OLDEST", "ELIGIBLE", "BATCHES", "WOULD", "CAP", "SKIPPED", "NOTES"}, strings.Fields(lines[1]))
	require.Len(t, lines, 2+len(tc.swept)+1, "a header, a line per table, the vacuum line")
	require.Equal(t, []string{"event_outbox", "transport", "4", "40d00h", "1", "false", "-", "-"}, strings.Fields(lines[2]))
	require.Equal(t, "vacuum: nothing holds VACUUM back (no holder, slot or dead-tuple count over its limit)", lines[len(lines)-1])
}
