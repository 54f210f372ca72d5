-- Demo seed for the financial service's own tables (go tool mage demo), run after
-- queries/demo/transport.sql on a freshly created and migrated craig_demo_financial
-- database. Ages are relative to the database clock, like the cutoffs.

-- subsidy_reconcile_queue (window 30 d by processed_at): 4 processed 40 days
-- ago (DELETED); 2 dead-lettered 40 days ago and stamped processed too (kept:
-- only the dead-letter guard protects them); 3 unprocessed created 40 days
-- ago (kept); 3 processed yesterday (kept).
INSERT INTO subsidy_reconcile_queue (created_at, processed_at, dead_lettered_at)
SELECT now() - interval '41 days', now() - interval '40 days' - g * interval '1 minute', NULL
FROM generate_series(1, 4) AS g;

INSERT INTO subsidy_reconcile_queue (created_at, processed_at, dead_lettered_at)
SELECT now() - interval '41 days',
       now() - interval '40 days' - g * interval '1 minute',
       now() - interval '40 days' - g * interval '1 minute'
FROM generate_series(1, 2) AS g;

INSERT INTO subsidy_reconcile_queue (created_at, processed_at, dead_lettered_at)
SELECT now() - interval '40 days' - g * interval '1 minute', NULL, NULL
FROM generate_series(1, 3) AS g;

INSERT INTO subsidy_reconcile_queue (created_at, processed_at, dead_lettered_at)
SELECT now() - interval '2 days', now() - interval '1 day' - g * interval '1 minute', NULL
FROM generate_series(1, 3) AS g;
