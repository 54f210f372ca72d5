-- Demo seed for the security service's own tables (go tool mage demo), run
-- after queries/demo/transport.sql on a freshly created and migrated
-- craig_demo_security database. Ages are relative to the database clock.

-- audit_log (archive-then-prune, never swept): 1,500 entries from 100 days
-- ago (past the 90-day hot window: ARCHIVED, then deleted, when the demo
-- turns the archiver on) and 20 from yesterday (kept).
INSERT INTO audit_log (occurred_at, actor, action, subject_id, detail)
SELECT now() - interval '100 days' - g * interval '1 second', 'worker-' || (g % 17),
       (ARRAY['case.viewed', 'case.updated', 'placement.approved'])[1 + g % 3], 'case-' || g,
       jsonb_build_object('ip', '10.0.' || (g % 250) || '.' || (g % 199), 'county', 'county-' || (g % 58))
FROM generate_series(1, 1500) AS g;

INSERT INTO audit_log (occurred_at, actor, action, subject_id)
SELECT now() - interval '1 day' - g * interval '1 second', 'worker-1', 'case.viewed', 'case-fresh-' || g
FROM generate_series(1, 20) AS g;

-- dead_letter_audit: 40 events dead-lettered 95 days ago (archived too).
INSERT INTO dead_letter_audit (dlq_received_at, event_type, payload, reason)
SELECT now() - interval '95 days' - g * interval '1 minute', 'exchange.sent', jsonb_build_object('case_id', g),
       'handler failed 5 times: connection refused'
FROM generate_series(1, 40) AS g;
