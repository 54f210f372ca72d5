package rules_test

import (
	"testing"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/services/rules"
)

// seeds is the rules service's conformance seed registry: one method per
// registered table (kerneltest.SeedsOf). A new table adds its seed as a
// method in a test file of its own.
type seeds struct{}

// RuleEvaluations is rule_evaluations' archivetest seed.
func (seeds) RuleEvaluations() kerneltest.Seed {
	return kerneltest.Seed{Table: rules.EvaluationsTable, SQL: rulesSeed}
}

// TestConformance runs the kernel's per-service suite over every table the
// rules service registers (the transport tables swept, rule_evaluations
// archived: the whole archivetest suite).
func TestConformance(t *testing.T) {
	t.Parallel()
	kerneltest.CheckService(t, rules.Spec(), kerneltest.SeedsOf(seeds{}))
}
