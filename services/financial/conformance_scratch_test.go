package financial_test

import (
	"testing"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/services/financial"
)

// seeds is the financial service's conformance seed registry: one method
// per registered table (kerneltest.SeedsOf).
type seeds struct{}

// Reconcile: keep rows are processed at the age and dead-lettered (a
// dead-lettered row is evidence, however old); the others processed at the
// age and never dead-lettered. (An unprocessed row has no age to sweep by;
// the kernel's plan check covers NULLs.)
func (seeds) Reconcile() kerneltest.Seed {
	return kerneltest.Seed{Table: financial.ReconcileTable, SQL: `INSERT INTO subsidy_reconcile_queue (processed_at, dead_lettered_at)
  SELECT now() - make_interval(secs => age), CASE WHEN keep THEN now() END
  FROM unnest($1::float8[], $2::bool[]) AS s(age, keep)`}
}

// TestConformance runs the kernel's per-service suite over every table the
// financial service registers.
func TestConformance(t *testing.T) {
	t.Parallel()
	kerneltest.CheckService(t, financial.Spec(), kerneltest.SeedsOf(seeds{}))
}
