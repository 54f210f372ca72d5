package exchange_test

import "github.com/craig/retention/kernel/kerneltest"

// WebhookAttempts: keep rows are pending attempts; the others finished.
func (seeds) WebhookAttempts() kerneltest.Seed {
	return kerneltest.Seed{Table: "exchange_webhook_attempts", SQL: `INSERT INTO exchange_webhook_attempts (status, finished_at)
  SELECT CASE WHEN keep THEN 'pending' ELSE (ARRAY['delivered', 'abandoned'])[1 + (ord / 2) % 2] END,
         now() - make_interval(secs => age)
  FROM unnest($1::float8[], $2::bool[]) WITH ORDINALITY AS s(age, keep, ord)`}
}
