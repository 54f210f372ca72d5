package financial_test

import (
	"fmt"
	"maps"
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/financial"
)

// TestConformance runs the kernel's per-service suite over every table the
// financial service registers.
func TestConformance(t *testing.T) {
	t.Parallel()
	s := financial.DefaultSettings()
	seeds := kerneltest.TransportSeeds(s.EventOutboxRetentionDays, s.EventInboxRetentionDays)
	maps.Copy(seeds, map[string]string{
		financial.ReconcileTable: fmt.Sprintf(`
INSERT INTO subsidy_reconcile_queue (processed_at, dead_lettered_at)
  SELECT p, d FROM unnest(ARRAY[%[1]s, %[2]s, now() - interval '40 days', now() - interval '400 days', NULL]) AS p,
       unnest(ARRAY[NULL, now() - interval '40 days']::timestamptz[]) AS d;
INSERT INTO subsidy_reconcile_queue (processed_at)
  SELECT now() - interval '40 days' - g * interval '1 minute' FROM generate_series(1, 4) AS g;`,
			kerneltest.WindowEdges(settings.DefaultLocalRetentionDays)...),
	})
	kerneltest.CheckSpec(t, kerneltest.Tables{Service: financial.Name, Groups: app.Groups(financial.Spec(), s)}, seeds)
}
