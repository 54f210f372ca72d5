package invariants_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
)

// day is the unit of the seeds' ages.
const day = 24 * time.Hour

// ageTolerance absorbs the time between seeding a row and checking it.
const ageTolerance = time.Minute

// seed inserts the rows of TestCheckCountsOnlyRowsPastWindowPlusGrace. Ages
// are relative to the database clock and stay clear of the thresholds by an
// hour, so the few seconds a test takes never move a row across one.
const seed = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
  ('overrun',      '{}', now() - interval '40 days',          now() - interval '40 days'),
  ('overrun',      '{}', now() - interval '32 days 1 hour',   now() - interval '32 days'),
  ('within_grace', '{}', now() - interval '31 days 23 hours', now() - interval '31 days'),
  ('within_grace', '{}', now() - interval '30 days 1 hour',   now() - interval '30 days'),
  ('fresh',        '{}', now() - interval '1 day',            now() - interval '1 day');
INSERT INTO event_outbox (event_type, payload, created_at) VALUES
  ('pending', '{}', now() - interval '400 days'),
  ('pending', '{}', now() - interval '40 days');
INSERT INTO event_inbox (event_id, event_type, received_at) VALUES
  (gen_random_uuid(), 'overrun',      now() - interval '50 days'),
  (gen_random_uuid(), 'overrun',      now() - interval '40 days'),
  (gen_random_uuid(), 'overrun',      now() - interval '33 days 1 hour'),
  (gen_random_uuid(), 'within_grace', now() - interval '32 days 23 hours'),
  (gen_random_uuid(), 'within_grace', now() - interval '32 days'),
  (gen_random_uuid(), 'fresh',        now() - interval '2 days');
`

func TestCheckCountsOnlyRowsPastWindowPlusGrace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, seed)

	out, in := transportSpecs(30, 31)
	results, err := invariants.CheckAll(ctx, db.Pool, []invariants.Spec{out, in})
	require.NoError(t, err)
	require.Len(t, results, 2)

	// The outbox: two published rows past 32 d; the pending ones (however
	// old) and the published ones within the grace do not count.
	r := results[0]
	require.Equal(t, "outbox_retention_overrun", r.Name)
	require.Equal(t, sweep.OutboxTable, r.Table)
	require.Equal(t, 32, r.ThresholdDays)
	require.Equal(t, int64(2), r.Violations)
	require.NotNil(t, r.OldestAgeSeconds)
	require.InDelta(t, (40 * day).Seconds(), *r.OldestAgeSeconds, ageTolerance.Seconds(), "the oldest overrunning row, not the 400-day pending one")

	// The inbox: three rows past 33 d.
	r = results[1]
	require.Equal(t, "inbox_retention_overrun", r.Name)
	require.Equal(t, 33, r.ThresholdDays)
	require.Equal(t, int64(3), r.Violations)
	require.NotNil(t, r.OldestAgeSeconds)
	require.InDelta(t, (50 * day).Seconds(), *r.OldestAgeSeconds, ageTolerance.Seconds())
	require.True(t, invariants.Violated(results))

	// Watchdogs report; they never delete.
	require.Equal(t, int64(7), db.Count(t, "SELECT count(*) FROM event_outbox"))
	require.Equal(t, int64(6), db.Count(t, "SELECT count(*) FROM event_inbox"))

	// One sweep (which also takes the rows within the grace) clears both.
	g := sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31})
	for _, p := range g.Policies {
		_, err := prune.PruneTable(ctx, db.Pool, p)
		require.NoError(t, err)
	}
	results, err = invariants.CheckAll(ctx, db.Pool, []invariants.Spec{out, in})
	require.NoError(t, err)
	for _, r := range results {
		require.Zero(t, r.Violations, r.Name)
		require.Nil(t, r.OldestAgeSeconds, r.Name)
	}
	require.False(t, invariants.Violated(results))
}

func TestCheckFollowsTheConfiguredWindow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, seed)

	tests := []struct {
		name          string
		outbox, inbox int
		wantOut       int64
		wantIn        int64
	}{
		// Thresholds 32/33: as seeded.
		{"Defaults", 30, 31, 2, 3},
		// Thresholds 29/30: the within-grace rows now overrun too.
		{"Shorter", 27, 28, 4, 5},
		// Thresholds 47/48: only the 50-day inbox row is left.
		{"Longer", 45, 46, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, in := transportSpecs(tt.outbox, tt.inbox)
			results, err := invariants.CheckAll(ctx, db.Pool, []invariants.Spec{out, in})
			require.NoError(t, err)
			require.Equal(t, tt.wantOut, results[0].Violations)
			require.Equal(t, tt.wantIn, results[1].Violations)
		})
	}
}

func TestCheckDisabledIgnoresOverrunningRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, seed)

	out, in := transportSpecs(0, 31)
	results, err := invariants.CheckAll(ctx, db.Pool, []invariants.Spec{out, in})
	require.NoError(t, err)
	require.True(t, results[0].Disabled)
	require.Zero(t, results[0].Violations, "a disabled sweep cannot overrun")
	require.Nil(t, results[0].OldestAgeSeconds)
	require.Equal(t, int64(3), results[1].Violations, "the other table is still checked")
}

func TestCheckAllStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, seed)

	out, in := transportSpecs(30, 31)
	missing := invariants.FromPolicy(prune.Policy{
		Declaration: prune.Declaration{
			Table:       "no_such_table",
			AgeColumn:   "created_at",
			Eligible:    "TRUE",
			DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) { return 0, nil },
		},
		Bounds: prune.Bounds{
			WindowDays: 30,
		},
	})
	results, err := invariants.CheckAll(ctx, db.Pool, []invariants.Spec{out, missing, in})
	require.ErrorContains(t, err, "invariant no_such_table_retention_overrun")
	require.Len(t, results, 1, "the results before the failing invariant are returned")
	require.Equal(t, "outbox_retention_overrun", results[0].Name)
}

// TestUnparsedSubjectsErrorQuotesNoValue: a table's subject expression
// that raises (its contract is never to) fails the unparsed-subjects
// watchdog by its SQLSTATE only: the database's message, which quotes
// the value it could not read, a subject in clear, is withheld.
func TestUnparsedSubjectsErrorQuotesNoValue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, `CREATE TABLE notes (id int PRIMARY KEY, case_id text)`)
	db.Exec(t, `INSERT INTO notes VALUES (1, 'case-17')`)
	s := invariants.ForUnparsedSubjects("notes", `SELECT count(*) FROM notes AS t WHERE (t.case_id ~ '[0-9]') AND ('case:' || (t.case_id::int)::text) IS NULL`, true)
	_, err := invariants.Check(ctx, db.Pool, s)
	require.ErrorContains(t, err, "invariant notes_subject_unparsed")
	require.ErrorContains(t, err, "22P02")
	require.NotContains(t, err.Error(), "case-17")
}
