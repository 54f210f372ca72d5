-- Demo seed for the rules service database (go tool mage demo). Runs once on
-- a freshly created and migrated craig_demo_rules database. Ages are relative
-- to the database clock, like the sweep's cutoffs. With the default windows
-- (outbox 30 d, inbox 31 d) the sweep deletes exactly the rows marked DELETED.

-- event_outbox: 5 aged published (DELETED), 3 aged pending that failed to
-- publish (kept: never swept), 4 fresh published (kept).
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'rules.demo.aged_published', jsonb_build_object('seq', g),
       now() - interval '40 days' - g * interval '1 minute',
       now() - interval '40 days' - g * interval '1 minute' + interval '2 seconds'
FROM generate_series(1, 5) AS g;

INSERT INTO event_outbox (event_type, payload, created_at, published_at, last_error)
SELECT 'rules.demo.aged_pending', jsonb_build_object('seq', g),
       now() - interval '40 days' - g * interval '1 minute',
       NULL,
       'publish: broker did not confirm (demo)'
FROM generate_series(1, 3) AS g;

INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'rules.demo.fresh_published', jsonb_build_object('seq', g),
       now() - interval '1 day' - g * interval '1 minute',
       now() - interval '1 day' - g * interval '1 minute' + interval '2 seconds'
FROM generate_series(1, 4) AS g;

-- event_inbox: 5 received 40 days ago (DELETED), 3 received 10 days ago (kept).
INSERT INTO event_inbox (event_id, event_type, received_at)
SELECT gen_random_uuid(), 'upstream.demo.aged', now() - interval '40 days' - g * interval '1 minute'
FROM generate_series(1, 5) AS g;

INSERT INTO event_inbox (event_id, event_type, received_at)
SELECT gen_random_uuid(), 'upstream.demo.recent', now() - interval '10 days' - g * interval '1 minute'
FROM generate_series(1, 3) AS g;

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
