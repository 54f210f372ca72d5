-- Demo seed for the exchange service's own tables (go tool mage demo), run after
-- queries/demo/transport.sql on a freshly created and migrated craig_demo_exchange
-- database. Ages are relative to the database clock, like the cutoffs.

-- exchange_send_jobs (window 30 d by completed_at): 4 sent and 2 failed
-- completed 45 days ago (DELETED); 2 pending and 2 in_flight created 45 days
-- ago (kept: not terminal); 2 dead_letter stamped completed 45 days ago
-- (kept: only the status guard protects them); 3 sent yesterday (kept).
INSERT INTO exchange_send_jobs (status, created_at, completed_at)
SELECT s.status, now() - interval '46 days', now() - interval '45 days' - g * interval '1 minute'
FROM (VALUES ('sent', 4), ('failed', 2), ('dead_letter', 2)) AS s(status, n),
     generate_series(1, s.n) AS g;

INSERT INTO exchange_send_jobs (status, created_at, completed_at)
SELECT s.status, now() - interval '45 days' - g * interval '1 minute', NULL
FROM (VALUES ('pending', 2), ('in_flight', 2)) AS s(status, n),
     generate_series(1, s.n) AS g;

INSERT INTO exchange_send_jobs (status, created_at, completed_at)
SELECT 'sent', now() - interval '1 day' - interval '5 minutes', now() - interval '1 day' - g * interval '1 minute'
FROM generate_series(1, 3) AS g;
