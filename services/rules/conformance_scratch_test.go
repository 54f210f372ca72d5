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
// archived: the whole archivetest suite).
func TestConformance(t *testing.T) {
	t.Parallel()
	s := rules.DefaultSettings()
	seeds := kerneltest.TransportSeeds(s.EventOutboxRetentionDays, s.EventInboxRetentionDays)
	maps.Copy(seeds, map[string]string{
		rules.EvaluationsTable: rulesSeed,
	})
	kerneltest.CheckSpec(t, kerneltest.Tables{Service: rules.Name, Groups: app.Groups(rules.Spec(), s), Archived: rules.ArchiveTables(), Bookkeeper: rules.Bookkeeper()}, seeds)
}
