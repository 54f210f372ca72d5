package archive_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
)

// fairEnv is a scratch environment with the kernel's ledger (the pass
// cursor is in the archive set) and five archived test tables.
func fairEnv(t *testing.T, rows map[string]int) (context.Context, *archive.Engine, []string) {
	t.Helper()
	ctx, env := newScratchEnv(t)
	tables := []string{"fair_a", "fair_b", "fair_c", "fair_d", "fair_e"}
	db := kerneltest.NewDB(t, kerneltest.ArchivingFixture()...)
	env.db = db
	var specs []archive.TableSpec
	for _, tbl := range tables {
		db.Exec(t, fmt.Sprintf(itemsDDL, pgx.Identifier{tbl}.Sanitize()))
		seedItems(t, db, tbl, rows[tbl], 200, 10)
		specs = append(specs, itemsSpec(tbl))
	}
	eng := env.engine(t, specs, archive.Bookkeeper{EventType: "test.archived", SourceService: "craig-test"}.Bookkeep, func(c *archive.Config) {
		c.BatchSize, c.LedgerHolds = 1, true
	})
	return ctx, eng, tables
}

// TestPassesGoRoundRobinAcrossPasses: five tables, budget 1 a pass. Each
// pass starts at the table after the last one the previous pass gave a
// batch, and an empty table costs no batch: the passes archive the tables'
// rows in turn, and More is false exactly when no table has a row past its
// hot window left (every pass started at the first table before, and the
// fourth and fifth tables' rows were never reached while the first had
// rows).
func TestPassesGoRoundRobinAcrossPasses(t *testing.T) {
	t.Parallel()
	ctx, eng, _ := fairEnv(t, map[string]int{"fair_a": 3, "fair_c": 1, "fair_e": 1})
	var got []string
	var more []bool
	for range 6 {
		rep, err := eng.RunPass(ctx, 1)
		require.NoError(t, err)
		require.NoError(t, rep.Err())
		for _, tr := range rep.Tables {
			for range tr.Archives {
				got = append(got, tr.Table)
			}
		}
		more = append(more, rep.More)
	}
	require.Equal(t, []string{"fair_a", "fair_c", "fair_e", "fair_a", "fair_a"}, got, "one batch a pass, in turn; the empty tables cost none")
	require.Equal(t, []bool{true, true, true, true, false, false}, more)
}

// TestAnEmptyPassIsNotMore: with nothing past any table's hot window a pass
// archives nothing, spends nothing and answers More false.
func TestAnEmptyPassIsNotMore(t *testing.T) {
	t.Parallel()
	ctx, eng, _ := fairEnv(t, nil)
	rep, err := eng.RunPass(ctx, 1)
	require.NoError(t, err)
	require.False(t, rep.More)
	for _, tr := range rep.Tables {
		require.Empty(t, tr.Archives)
	}
}
