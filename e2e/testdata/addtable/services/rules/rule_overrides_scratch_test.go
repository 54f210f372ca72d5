package rules_test

import "github.com/craig/retention/kernel/kerneltest"

// RuleOverrides is rule_overrides' archivetest seed: $1 ids, $2 ages in
// seconds, $3 bytes of padding.
func (seeds) RuleOverrides() kerneltest.Seed {
	return kerneltest.Seed{Table: "rule_overrides", SQL: `INSERT INTO rule_overrides (id, overridden_at, rule_id, overridden_by, reason)
  SELECT id, now() - make_interval(secs => age), 'r-' || ord, 'ops:erin', repeat('w', pad)
  FROM unnest($1::uuid[], $2::float8[], $3::int[]) WITH ORDINALITY AS s(id, age, pad, ord)`}
}
