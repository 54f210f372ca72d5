-- Demo seed for the rules service's own tables (go tool mage demo), run after
-- queries/demo/transport.sql on a freshly created and migrated craig_demo_rules
-- database. Ages are relative to the database clock, like the cutoffs.

-- rule_evaluations (archive-then-prune, never swept): 2,500 evaluated 100 days
-- ago (older than the 90-day hot window: ARCHIVED, then deleted, when the
-- demo turns the archiver on) and 10 evaluated yesterday (kept).
INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
SELECT now() - interval '100 days' - g * interval '1 second',
       'eligibility.kinship.' || (g % 7),
       jsonb_build_object('case_id', g, 'household_income', 1234.50 + g, 'ratio', 0.1 + g / 1000.0),
       jsonb_build_object('eligible', g % 3 <> 0, 'score', 12345678901234567890.123456789 + g)
FROM generate_series(1, 2500) AS g;

INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
SELECT now() - interval '1 day' - g * interval '1 second', 'eligibility.kinship.fresh',
       jsonb_build_object('case_id', g), jsonb_build_object('eligible', true)
FROM generate_series(1, 10) AS g;
