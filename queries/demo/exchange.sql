-- Demo seed for the exchange service database (go tool mage demo). Runs once on
-- a freshly created and migrated craig_demo_exchange database. Ages are relative
-- to the database clock, like the sweep's cutoffs. With the default windows
-- (outbox 30 d, inbox 31 d) the sweep deletes exactly the rows marked DELETED.

-- event_outbox: 5 aged published (DELETED), 3 aged pending that failed to
-- publish (kept: never swept), 4 fresh published (kept).
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'exchange.demo.aged_published', jsonb_build_object('seq', g),
       now() - interval '40 days' - g * interval '1 minute',
       now() - interval '40 days' - g * interval '1 minute' + interval '2 seconds'
FROM generate_series(1, 5) AS g;

INSERT INTO event_outbox (event_type, payload, created_at, published_at, last_error)
SELECT 'exchange.demo.aged_pending', jsonb_build_object('seq', g),
       now() - interval '40 days' - g * interval '1 minute',
       NULL,
       'publish: broker did not confirm (demo)'
FROM generate_series(1, 3) AS g;

INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'exchange.demo.fresh_published', jsonb_build_object('seq', g),
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
