package security_test

import "github.com/craig/retention/kernel/kerneltest"

// AccessReviews is access_reviews' archivetest seed: $1 ids, $2 ages in
// seconds, $3 bytes of padding; each review about case <row number>.
func (seeds) AccessReviews() kerneltest.Seed {
	return kerneltest.Seed{Table: "access_reviews", SQL: `INSERT INTO access_reviews (id, reviewed_at, case_ref, reviewer, outcome)
  SELECT id, now() - make_interval(secs => age), 'case-' || ord, 'ops:erin', 'kept ' || repeat('w', pad)
  FROM unnest($1::uuid[], $2::float8[], $3::int[]) WITH ORDINALITY AS s(id, age, pad, ord)`}
}
