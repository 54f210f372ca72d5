package invariants_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
)

// TestExtremeTimestamps: ages of rows
// at -infinity or BC dates overflowed in the invariant and dry-run output
// (-9223372036.85 s), and published outbox rows dated in the future were
// kept forever with no watchdog saying so.
func TestExtremeTimestamps(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
		('neg_inf', '{}', '-infinity', now()),
		('bc',      '{}', '0044-03-15 12:00:00+00 BC', now()),
		('old',     '{}', now() - interval '40 days', now()),
		('ahead',   '{}', now() + interval '2 hours', now()),
		('far',     '{}', now() + interval '100 years', now()),
		('pos_inf', '{}', 'infinity', now()),
		('skewed',  '{}', now() + interval '5 minutes', now())`)
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at) VALUES ('pending_future', '{}', now() + interval '1 year')`)

	out := invariants.FromPolicy(sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31}).Policies[0])
	future := invariants.FutureFromPolicy(sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31}).Policies[0])
	results, err := invariants.CheckAll(ctx, db.Pool, []invariants.Spec{out, future})
	require.NoError(t, err)

	r := results[0]
	require.Equal(t, int64(3), r.Violations, "-infinity, BC and 40 days")
	require.NotNil(t, r.OldestAgeSeconds)
	// -infinity is aged from the earliest timestamp PostgreSQL has (4713
	// BC): about 2.1e11 s, not a wrapped negative number.
	require.Greater(t, *r.OldestAgeSeconds, 2.0e11)
	require.Less(t, *r.OldestAgeSeconds, 2.2e11)

	f := results[1]
	require.Equal(t, "outbox_future_dated", f.Name)
	require.Equal(t, int64(3), f.Violations, "2 hours, 100 years and infinity ahead; 5 minutes is clock skew; pending rows are not the sweep's")
	require.NotNil(t, f.OldestAgeSeconds)
	require.Less(t, *f.OldestAgeSeconds, -9e12, "+infinity is aged from the latest timestamp: far in the future, finite")
	require.InDelta(t, invariants.FutureSkew.Seconds(), f.FutureSkewSeconds, 0)

	_, err = json.Marshal(results)
	require.NoError(t, err, "every age is finite: the JSON report encodes")

	// The dry run and the backlog gauge agree.
	p := sweep.Bounds{BatchSize: 5000, CycleCap: 1_000_000}.Apply([]sweep.Group{sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31})})[0].Policies[0]
	plan, err := prune.Plan(ctx, db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, int64(3), plan.Count)
	require.Greater(t, *plan.OldestAgeSeconds(), 2.0e11)
	age, err := prune.OldestEligibleAge(ctx, db.Pool, p)
	require.NoError(t, err)
	require.Greater(t, age, 200*365*24*time.Hour, "saturated, not wrapped")

	// The sweep deletes the -infinity and BC rows with the 40-day one and
	// keeps the future-dated ones.
	rep, err := prune.PruneTable(ctx, db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, int64(3), rep.Deleted)
	require.Equal(t, int64(5), db.Count(t, `SELECT count(*) FROM event_outbox`))
}
