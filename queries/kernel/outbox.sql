-- Transactional outbox: staging, draining and the admin replay.

-- name: StageEvent :exec
INSERT INTO event_outbox (id, event_type, payload)
VALUES (sqlc.arg(id), sqlc.arg(event_type), sqlc.arg(payload));

-- ClaimPending locks up to batch_limit pending rows, oldest first, skipping
-- rows another drainer holds. Rows that failed before go after fresh ones so a
-- persistently failing event cannot starve the rest.
-- name: ClaimPending :many
SELECT id, event_type, payload, created_at
FROM event_outbox
WHERE published_at IS NULL
ORDER BY (last_error IS NOT NULL), created_at
LIMIT sqlc.arg(batch_limit)::int
FOR UPDATE SKIP LOCKED;

-- name: MarkPublished :exec
UPDATE event_outbox
SET published_at = now(), last_error = NULL
WHERE id = sqlc.arg(id) AND published_at IS NULL;

-- name: RecordPublishFailure :exec
UPDATE event_outbox
SET last_error = sqlc.arg(last_error)
WHERE id = sqlc.arg(id) AND published_at IS NULL;

-- MarkMalformed stamps an envelope that can never be published so the drain
-- stops retrying it; last_error keeps the reason (seed 000, D-B caveat).
-- name: MarkMalformed :exec
UPDATE event_outbox
SET published_at = now(), last_error = sqlc.arg(last_error)
WHERE id = sqlc.arg(id) AND published_at IS NULL;

-- ReplayCutoff is the oldest created_at a replay may reach: rows older than
-- the outbox window may have lost their consumers' inbox dedup records.
-- name: ReplayCutoff :one
SELECT (now() - make_interval(days => sqlc.arg(window_days)::int))::timestamptz AS cutoff;

-- ReplayRange re-nulls published_at in [from, to) so the drain publishes the
-- rows again. The window clamp is repeated here, at the statement that acts.
-- name: ReplayRange :execrows
UPDATE event_outbox
SET published_at = NULL, last_error = NULL
WHERE created_at >= sqlc.arg(from_at)::timestamptz
  AND created_at < sqlc.arg(to_at)::timestamptz
  AND published_at IS NOT NULL
  AND created_at >= now() - make_interval(days => sqlc.arg(window_days)::int);
