package exchange_test

import (
	"fmt"
	"maps"
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/exchange"
)

// TestConformance runs the kernel's per-service suite over every table the
// exchange service registers: each needs a seed here, and each swept one
// must delete exactly what its dry run, gauge and invariant say.
func TestConformance(t *testing.T) {
	t.Parallel()
	s := exchange.DefaultSettings()
	seeds := kerneltest.TransportSeeds(s.EventOutboxRetentionDays, s.EventInboxRetentionDays)
	maps.Copy(seeds, map[string]string{
		exchange.SendJobsTable: fmt.Sprintf(`
INSERT INTO exchange_send_jobs (status, completed_at)
  SELECT s, c FROM unnest(ARRAY['pending', 'in_flight', 'sent', 'failed', 'dead_letter']) AS s,
       unnest(ARRAY[%[1]s, %[2]s, now() - interval '40 days', now() - interval '400 days', NULL]) AS c;
INSERT INTO exchange_send_jobs (status, completed_at)
  SELECT 'sent', now() - interval '40 days' - g * interval '1 minute' FROM generate_series(1, 3) AS g;`,
			kerneltest.WindowEdges(settings.DefaultLocalRetentionDays)...),
	})
	kerneltest.CheckSpec(t, kerneltest.Tables{Service: exchange.Name, Groups: app.Groups(exchange.Spec(), s)}, seeds)
}
