-- Inbox dedup: the insert is the claim. Zero rows affected means the event was
-- received before and its handler must not run again.

-- name: RecordReceived :execrows
INSERT INTO event_inbox (event_id, event_type)
VALUES (sqlc.arg(event_id), sqlc.arg(event_type))
ON CONFLICT (event_id) DO NOTHING;

-- ReleaseInboxClaim gives back an event id an event could not prove it
-- owns (a case event whose signature does not prove the configured
-- producer): the genuine event with that id is then still received.
-- name: ReleaseInboxClaim :exec
DELETE FROM event_inbox WHERE event_id = sqlc.arg(event_id);
