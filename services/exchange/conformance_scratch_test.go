package exchange_test

import (
	"testing"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/services/exchange"
)

// seeds is the exchange service's conformance seed registry: one method per
// registered table (kerneltest.SeedsOf), each beside its table's tests. A
// new table adds its seed as a method in a test file of its own.
type seeds struct{}

// SendJobs: keep rows are pending, in-flight and dead-letter jobs; the
// others are terminal.
func (seeds) SendJobs() kerneltest.Seed {
	return kerneltest.Seed{Table: exchange.SendJobsTable, SQL: `INSERT INTO exchange_send_jobs (status, completed_at)
  SELECT CASE WHEN keep THEN (ARRAY['pending', 'in_flight', 'dead_letter'])[1 + ord % 3]
              ELSE (ARRAY['sent', 'failed'])[1 + (ord / 2) % 2] END,
         now() - make_interval(secs => age)
  FROM unnest($1::float8[], $2::bool[]) WITH ORDINALITY AS s(age, keep, ord)`}
}

// TestConformance runs the kernel's per-service suite over every table the
// exchange service registers: each needs a seed, each swept one must delete
// exactly what its dry run, gauge and invariant say and keep every row its
// Keep protects, at every age.
func TestConformance(t *testing.T) {
	t.Parallel()
	kerneltest.CheckService(t, exchange.Spec(), kerneltest.SeedsOf(seeds{}))
}
