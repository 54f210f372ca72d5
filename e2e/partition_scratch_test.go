package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/craig/retention/services/rules"
)

// TestSweepPartitionedOutbox: on a service whose outbox an
// operator converted to daily partitions (the conversion `go tool mage
// partition:outbox` runs), `sweep --once --dry-run --json` names the old
// partitions it would drop and keep and changes nothing; `sweep --once
// --json` drops the day holding only published rows, keeps the day a
// pending row is evidence for (deleting its published rows), and reports
// both.
func TestSweepPartitionedOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tc := serviceCase{service: rules.Name, run: runnerOf(rules.Spec())}
	day := func(daysAgo int) time.Time {
		return time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -daysAgo).Add(12 * time.Hour)
	}
	db, env := prepare(t, tc)
	insert := func(n, daysAgo int, published bool) {
		db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
			SELECT 'e2e', '{}', $1::timestamptz, CASE WHEN $2::bool THEN $1::timestamptz END FROM generate_series(1, $3::int)`,
			day(daysAgo), published, n)
	}
	insert(5, 40, true)
	insert(3, 38, true)
	insert(1, 38, false)
	insert(4, 2, true)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	// Released on every exit: a failed conversion left it checked out and
	// the database's cleanup (pool.Close) waited for it forever.
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, migrations.PartitionOutboxSQL())
	require.NoError(t, err, "pg_partman installed (.ci/run installs postgresql-<version>-partman)")
	require.NoError(t, tx.Commit(ctx))
	partition := func(daysAgo int) string { return "event_outbox_p" + day(daysAgo).Format("2006_01_02") }
	outbox := func() sweep.TableReport {
		t.Helper()
		code, out, errOut := runCmd(t, tc.run, env, "sweep", "--once", "--json")
		require.Equal(t, app.ExitOK, code, errOut)
		var rep sweep.Report
		require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
		for _, tr := range rep.Tables {
			if tr.Table == sweep.OutboxTable {
				return tr
			}
		}
		t.Fatalf("no outbox in %s", out)
		return sweep.TableReport{}
	}

	code, out, errOut := runCmd(t, tc.run, env, "sweep", "--once", "--dry-run", "--json")
	require.Equal(t, app.ExitOK, code, errOut)
	var dry struct {
		Tables []struct {
			Table  string   `json:"table"`
			ToDrop []string `json:"partitions_to_drop"`
			ToKeep []string `json:"partitions_to_keep"`
		} `json:"tables"`
	}
	require.NoError(t, json.Unmarshal(out, &dry), "%s", out)
	require.Equal(t, sweep.OutboxTable, dry.Tables[0].Table)
	require.Contains(t, dry.Tables[0].ToDrop, partition(40))
	require.Equal(t, []string{partition(38)}, dry.Tables[0].ToKeep)
	require.Equal(t, int64(13), db.Count(t, "SELECT count(*) FROM event_outbox"), "a dry run changes nothing")

	// Ten old days (the conversion starts at the oldest row's), one kept: the first
	// run drops seven (the cap) and ends there; the second drops the rest
	// and deletes the kept day's published rows by batches.
	rep := outbox()
	require.Contains(t, rep.PartitionsDropped, partition(40), "published rows only: dropped whole")
	require.Len(t, rep.PartitionsDropped, 7, "at most a week of partitions a cycle")
	require.True(t, rep.Capped)
	require.Equal(t, []string{partition(38)}, rep.PartitionsKept, "the pending row keeps its day")
	require.Equal(t, int64(5), rep.Deleted, "the dropped partitions' rows")
	rep = outbox()
	require.Len(t, rep.PartitionsDropped, 2, "nine old days hold only published rows: 7 + 2")
	require.False(t, rep.Capped)
	require.Equal(t, int64(3), rep.Deleted, "the kept day's published rows, by batches")
	require.Equal(t, int64(5), db.Count(t, "SELECT count(*) FROM event_outbox"), "the pending row and the fresh ones stay")
	require.Equal(t, int64(1), db.Count(t, "SELECT count(*) FROM event_outbox WHERE published_at IS NULL"))
	require.Zero(t, db.Count(t, "SELECT count(*) FROM pg_class WHERE relname = $1", partition(40)))
}
