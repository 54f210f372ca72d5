-- Inbox dedup: the insert is the claim. Zero rows affected means the event was
-- received before and its handler must not run again.

-- name: RecordReceived :execrows
INSERT INTO event_inbox (event_id, event_type)
VALUES (sqlc.arg(event_id), sqlc.arg(event_type))
ON CONFLICT (event_id) DO NOTHING;
