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
-- stops retrying it; last_error keeps the reason.
-- name: MarkMalformed :exec
UPDATE event_outbox
SET published_at = now(), last_error = sqlc.arg(last_error)
WHERE id = sqlc.arg(id) AND published_at IS NULL;

-- ReplayCutoff is the oldest created_at a replay may reach: rows older than
-- the outbox window may have lost their consumers' inbox dedup records.
-- name: ReplayCutoff :one
SELECT (now() - make_interval(days => sqlc.arg(window_days)::int))::timestamptz AS cutoff;

-- CountReplayable counts the published rows a replay of [from, to) would
-- re-queue, within the clamp: the replay is refused above replay_max_rows.
-- name: CountReplayable :one
SELECT count(*)::bigint AS n
FROM event_outbox
WHERE created_at >= sqlc.arg(from_at)::timestamptz
  AND created_at < sqlc.arg(to_at)::timestamptz
  AND published_at IS NOT NULL
  AND created_at >= now() - make_interval(days => sqlc.arg(window_days)::int);

-- ReplayBatch re-nulls published_at for the next batch_limit published rows
-- of [from, to) after the (created_at, id) cursor, so the drain publishes
-- them again; each batch is its own statement (short row locks, bounded
-- WAL). The window clamp and the predicate are repeated in the outer
-- UPDATE, at the statement that acts. The cursor makes each row replayed at
-- most once per replay, even when the drain republishes it meanwhile.
-- name: ReplayBatch :many
UPDATE event_outbox AS o
SET published_at = NULL, last_error = NULL
WHERE o.id IN (
        SELECT i.id FROM event_outbox AS i
        WHERE i.created_at >= sqlc.arg(from_at)::timestamptz
          AND i.created_at < sqlc.arg(to_at)::timestamptz
          AND i.published_at IS NOT NULL
          AND i.created_at >= now() - make_interval(days => sqlc.arg(window_days)::int)
          AND (i.created_at, i.id) > (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
        ORDER BY i.created_at, i.id
        LIMIT sqlc.arg(batch_limit)::int)
  AND o.created_at >= sqlc.arg(from_at)::timestamptz
  AND o.created_at < sqlc.arg(to_at)::timestamptz
  AND o.published_at IS NOT NULL
  AND o.created_at >= now() - make_interval(days => sqlc.arg(window_days)::int)
RETURNING o.created_at, o.id;

-- PendingStats is what the outbox gauges show: unpublished rows and the age
-- of the oldest one (0 when none), by the database clock, read through the
-- drain's partial index on pending rows.
-- name: PendingStats :one
SELECT count(*)::bigint AS pending,
       COALESCE(extract(epoch FROM now()) - extract(epoch FROM min(created_at)), 0)::float8 AS oldest_age_seconds
FROM event_outbox
WHERE published_at IS NULL;
