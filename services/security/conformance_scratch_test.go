package security_test

import (
	"testing"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/services/security"
)

// Seeds of security's archived tables (the archivetest contract: $1 ids,
// $2 ages in seconds, $3 padding bytes).
const (
	auditLogSeed = `INSERT INTO audit_log (id, occurred_at, actor, action, subject_id, detail)
SELECT s.id, now() - make_interval(secs => s.age), 'user:' || (s.ord % 5), 'case.viewed', 'case-' || s.ord,
       jsonb_build_object('ip', '10.0.0.' || (s.ord % 250), 'amount', 1.10, 'note', 'caf' || chr(233), 'pad', repeat('p', s.pad),
                          'payload', jsonb_build_object('case_id', 1000 + s.ord % 7))
FROM unnest($1::uuid[], $2::float8[], $3::int[]) WITH ORDINALITY AS s(id, age, pad, ord)`
	deadLetterSeed = `INSERT INTO dead_letter_audit (id, dlq_received_at, event_type, payload, reason)
SELECT s.id, now() - make_interval(secs => s.age), 'exchange.sent',
       jsonb_build_object('case_id', s.ord, 'pad', repeat('p', s.pad)), 'handler failed 5 times: connection refused'
FROM unnest($1::uuid[], $2::float8[], $3::int[]) WITH ORDINALITY AS s(id, age, pad, ord)`
)

// seeds is the security service's conformance seed registry: one method
// per registered table (kerneltest.SeedsOf).
type seeds struct{}

// AuditLog is audit_log's archivetest seed.
func (seeds) AuditLog() kerneltest.Seed {
	return kerneltest.Seed{Table: security.AuditLogTable, SQL: auditLogSeed}
}

// DeadLetterAudit is dead_letter_audit's archivetest seed.
func (seeds) DeadLetterAudit() kerneltest.Seed {
	return kerneltest.Seed{Table: security.DeadLetterTable, SQL: deadLetterSeed}
}

// TestConformance runs the kernel's per-service suite over every table the
// security service registers: the transport tables swept, audit_log and
// dead_letter_audit archived (the whole archivetest suite each).
func TestConformance(t *testing.T) {
	t.Parallel()
	kerneltest.CheckService(t, security.Spec(), kerneltest.SeedsOf(seeds{}))
}
