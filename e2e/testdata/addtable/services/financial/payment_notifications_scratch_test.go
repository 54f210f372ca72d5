package financial_test

import "github.com/craig/retention/kernel/kerneltest"

// PaymentNotifications: keep rows are pending (created at the age); the
// others sent (completed at the age, created 400 days before it) or failed
// (created at the age, never completed), by turns: a delete that read
// created_at for a sent row would take rows too young.
func (seeds) PaymentNotifications() kerneltest.Seed {
	return kerneltest.Seed{Table: "payment_notifications", SQL: `INSERT INTO payment_notifications (status, created_at, completed_at)
  SELECT st, CASE WHEN st = 'sent' THEN now() - make_interval(secs => age) - interval '400 days' ELSE now() - make_interval(secs => age) END,
         CASE WHEN st = 'sent' THEN now() - make_interval(secs => age) END
  FROM (SELECT age, CASE WHEN keep THEN 'pending' WHEN ord % 2 = 0 THEN 'sent' ELSE 'failed' END AS st
        FROM unnest($1::float8[], $2::bool[]) WITH ORDINALITY AS s(age, keep, ord)) AS r`}
}
