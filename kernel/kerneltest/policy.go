package kerneltest

import (
	"context"
	"testing"

	"github.com/craig/retention/kernel/prune"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// CheckPolicy is the conformance suite every prune.Policy must pass (in the
// manner of River's riverdrivertest): on a scratch database the caller has
// seeded with rows the policy must delete AND rows it must keep, the
// kernel's read-only queries (built from AgeColumn and Eligible) must select
// exactly what the policy's hand-written batch delete deletes. The dry run's
// eligible count, batches and cap verdict are what the real run then does
// (and Keep, where set, is Eligible's complement on every row);
// afterwards nothing is eligible and the delete agrees. It deletes the
// eligible rows. Yielding to writers is turned off for the check: it only
// changes the batch sizes (the dry run plans full batches), and the writes
// of tests running beside this one would make the batch count vary
// (kernel/prune TestPruneYieldsToWriters covers it).
func CheckPolicy(t testing.TB, db *DB, p prune.Policy) {
	t.Helper()
	p.YieldToWriters = false
	ctx := context.Background()
	require.NoError(t, p.Inspectable())
	countAll := "SELECT count(*) FROM " + pgx.Identifier{p.Table}.Sanitize()
	total := db.Count(t, countAll)
	if p.Keep != "" {
		// Keep is Eligible's exact complement on every seeded row (NULLs
		// included): partition retirement drops on its word.
		require.Zero(t, db.Count(t, countAll+" WHERE (("+p.Eligible+") IS NOT TRUE) IS DISTINCT FROM (("+p.Keep+") IS TRUE)"),
			"Keep must be true exactly for the rows Eligible is not TRUE for")
	}

	plan, err := prune.Plan(ctx, db.Pool, p)
	require.NoError(t, err)
	require.Positive(t, plan.Count, "seed rows the policy must delete")
	require.Less(t, plan.Count, total, "seed rows the policy must keep")
	require.Equal(t, total, db.Count(t, countAll), "planning deletes nothing")

	rep, err := prune.PruneTable(ctx, db.Pool, p)
	require.NoError(t, err)
	require.Equal(t, plan.WouldCap, rep.Capped)
	require.Equal(t, plan.Batches, int64(rep.Batches))
	if plan.WouldCap {
		require.Equal(t, p.CycleCap, rep.Deleted)
	} else {
		require.Equal(t, plan.Count, rep.Deleted, "dry-run eligible == rows the real run deletes")
	}
	require.Equal(t, total-rep.Deleted, db.Count(t, countAll))

	// Drain the rest; then the kernel's queries find nothing.
	for rep.Capped {
		rep, err = prune.PruneTable(ctx, db.Pool, p)
		require.NoError(t, err)
	}
	require.Equal(t, total-plan.Count, db.Count(t, countAll), "everything the plan counted, and nothing else, was deleted")
	after, err := prune.Plan(ctx, db.Pool, p)
	require.NoError(t, err)
	require.Zero(t, after.Count)
	age, err := prune.OldestEligibleAge(ctx, db.Pool, p)
	require.NoError(t, err)
	require.Zero(t, age)
	rep, err = prune.PruneTable(ctx, db.Pool, p)
	require.NoError(t, err)
	require.Zero(t, rep.Deleted, "the delete agrees: nothing left")
}
