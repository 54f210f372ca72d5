package exchange_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/services/exchange"
	"github.com/stretchr/testify/require"
)

// seedJobs inserts, per status, one job completed 45 days ago and one
// completed 1 day ago (pending and in-flight jobs have no completion time).
func seedJobs(t *testing.T, db *kerneltest.DB) {
	t.Helper()
	for _, status := range []string{"pending", "in_flight", "sent", "failed", "dead_letter"} {
		for _, age := range []string{"45 days", "1 day"} {
			db.Exec(t, `INSERT INTO exchange_send_jobs (status, created_at, completed_at)
				VALUES ($1, now() - $2::interval, CASE WHEN $1 IN ('pending', 'in_flight') THEN NULL ELSE now() - $2::interval END)`, status, age)
		}
	}
}

func TestSendJobsPolicyDeletesOnlyAgedTerminalJobs(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, exchange.Spec().MigrationSets()...)
	seedJobs(t, db)

	rep, err := prune.PruneTable(context.Background(), db.Pool, exchange.SendJobsPolicy(exchange.DefaultSettings()))
	require.NoError(t, err)
	require.Equal(t, int64(2), rep.Deleted, "aged sent + aged failed")

	rows, err := db.Pool.Query(context.Background(), `SELECT status, count(*) FROM exchange_send_jobs GROUP BY status ORDER BY status`)
	require.NoError(t, err)
	got := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		got[s] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"pending": 2, "in_flight": 2, "sent": 1, "failed": 1, "dead_letter": 2}, got,
		"pending, in-flight and dead-letter jobs survive at any age; fresh terminal jobs survive")
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM exchange_send_jobs WHERE status IN ('sent','failed') AND completed_at < now() - interval '30 days'`))
}

func TestSendJobsWindowZeroDisablesOnlyThatSweep(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, exchange.Spec().MigrationSets()...)
	seedJobs(t, db)
	db.Exec(t, `INSERT INTO event_inbox (event_id, event_type, received_at) VALUES (gen_random_uuid(), 'x', now() - interval '40 days')`)

	var out, errOut bytes.Buffer
	code := app.Main(exchange.Spec(), []string{"sweep", "--once", "--json"}, &out, &errOut, []string{
		"CRAIG_EXCHANGE__DATABASE_URL=" + db.URL,
		"CRAIG_EXCHANGE__EXCHANGE_SEND_JOBS_RETENTION_DAYS=0",
	})
	require.Equal(t, app.ExitOK, code, errOut.String())
	var rep sweep.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	byTable := map[string]sweep.TableReport{}
	for _, tr := range rep.Tables {
		byTable[tr.Table] = tr
	}
	require.Equal(t, sweep.SkipDisabled, byTable[exchange.SendJobsTable].Skipped)
	require.Equal(t, int64(1), byTable[sweep.InboxTable].Deleted, "the inbox is still swept")
	require.Equal(t, int64(10), db.Count(t, `SELECT count(*) FROM exchange_send_jobs`))
}

func TestSweepOnceJSONReportsEveryTable(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, exchange.Spec().MigrationSets()...)
	seedJobs(t, db)
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'case.updated', '{}', now() - interval '31 days', now() - interval '31 days' FROM generate_series(1, 3)`)
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at) VALUES ('case.updated', '{}', now() - interval '31 days')`)
	db.Exec(t, `INSERT INTO event_inbox (event_id, event_type, received_at) VALUES (gen_random_uuid(), 'x', now() - interval '32 days'), (gen_random_uuid(), 'x', now() - interval '30 days')`)

	var out, errOut bytes.Buffer
	code := app.Main(exchange.Spec(), []string{"sweep", "--once", "--json"}, &out, &errOut, []string{"CRAIG_EXCHANGE__DATABASE_URL=" + db.URL})
	require.Equal(t, app.ExitOK, code, errOut.String())

	// Exactly one JSON object on stdout, with the documented fields.
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	var raw map[string]any
	require.NoError(t, dec.Decode(&raw))
	require.False(t, dec.More(), "stdout holds exactly one JSON object")
	require.Equal(t, true, raw["lock_acquired"])

	var rep sweep.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	// Every registered table, in the sweep's order (transport first), each
	// once; the seeded ones deleted what they should, any other (a table
	// added since, empty here) nothing.
	spec := exchange.Spec()
	var want []string
	for _, p := range sweep.Policies(app.Groups(spec, spec.Defaults)) {
		want = append(want, p.Label())
	}
	deleted := map[string]int64{sweep.OutboxTable: 3, sweep.InboxTable: 1, exchange.SendJobsTable: 2}
	var got []string
	for _, tr := range rep.Tables {
		require.False(t, tr.Capped)
		require.Empty(t, tr.Error)
		require.Equal(t, deleted[tr.Table], tr.Deleted, tr.Table)
		got = append(got, tr.Table)
	}
	require.Equal(t, want, got)
	require.Subset(t, got, []string{sweep.OutboxTable, sweep.InboxTable, exchange.SendJobsTable})
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL`), "the aged pending row is kept")
}
