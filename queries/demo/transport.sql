-- Demo seed of the transport tables, run on every service's freshly created and
-- migrated craig_demo_<service> database (go tool mage demo), before the
-- service's own seed file (queries/demo/<service>.sql) if it has one. Ages are relative
-- to the database clock, like the sweep's cutoffs. With the default windows
-- (outbox 30 d, inbox 31 d) the sweep deletes exactly the rows marked DELETED.

-- event_outbox: 5 aged published (DELETED), 3 aged pending that failed to
-- publish (kept: never swept), 4 fresh published (kept).
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'demo.aged_published', jsonb_build_object('seq', g),
       now() - interval '40 days' - g * interval '1 minute',
       now() - interval '40 days' - g * interval '1 minute' + interval '2 seconds'
FROM generate_series(1, 5) AS g;

INSERT INTO event_outbox (event_type, payload, created_at, published_at, last_error)
SELECT 'demo.aged_pending', jsonb_build_object('seq', g),
       now() - interval '40 days' - g * interval '1 minute',
       NULL,
       'publish: broker did not confirm (demo)'
FROM generate_series(1, 3) AS g;

INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'demo.fresh_published', jsonb_build_object('seq', g),
       now() - interval '1 day' - g * interval '1 minute',
       now() - interval '1 day' - g * interval '1 minute' + interval '2 seconds'
FROM generate_series(1, 4) AS g;

-- event_outbox: 1 envelope whose event type is no routing key (it holds a
-- space): the drain of `serve` dead-letters it at its first attempt (kept,
-- never published; `craigctl outbox dead-letters list` shows it).
INSERT INTO event_outbox (event_type, payload, created_at)
VALUES ('demo.undeliverable event', '{"seq": 1}', now() - interval '2 days');

-- event_inbox: 5 received 40 days ago (DELETED), 3 received 10 days ago (kept).
INSERT INTO event_inbox (event_id, event_type, received_at)
SELECT gen_random_uuid(), 'upstream.demo.aged', now() - interval '40 days' - g * interval '1 minute'
FROM generate_series(1, 5) AS g;

INSERT INTO event_inbox (event_id, event_type, received_at)
SELECT gen_random_uuid(), 'upstream.demo.recent', now() - interval '10 days' - g * interval '1 minute'
FROM generate_series(1, 3) AS g;
