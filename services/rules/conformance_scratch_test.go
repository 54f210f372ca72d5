//go:build scratch

package rules_test

import (
	"maps"
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/services/rules"
)

// TestConformance runs the kernel's per-service suite over every table the
// rules service registers (the transport tables swept, rule_evaluations
// archived: its archive properties are this package's archive suite).
func TestConformance(t *testing.T) {
	t.Parallel()
	s := rules.DefaultSettings()
	seeds := kerneltest.TransportSeeds(s.EventOutboxRetentionDays, s.EventInboxRetentionDays)
	maps.Copy(seeds, map[string]string{
		rules.EvaluationsTable: `
INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
  SELECT now() - make_interval(days => d), 'r', '{}', '{}' FROM unnest(ARRAY[91, 89, 400, 1]) AS d`,
	})
	kerneltest.CheckSpec(t, kerneltest.Tables{Service: rules.Name, Groups: app.Groups(rules.Spec(), s), Archived: rules.ArchiveTables(), Bookkeep: rules.Bookkeep}, seeds)
}
