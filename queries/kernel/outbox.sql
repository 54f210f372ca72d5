-- Transactional outbox: staging, draining and the admin replay.

-- name: StageEvent :exec
INSERT INTO event_outbox (id, event_type, payload)
VALUES (sqlc.arg(id), sqlc.arg(event_type), sqlc.arg(payload));

-- ClaimPending locks up to batch_limit rows the drain may publish now,
-- skipping rows another drainer holds: unpublished, not dead-lettered, and,
-- for a row that failed before, past its backoff (backoff_base_seconds *
-- 2^(attempts-1), at most backoff_max_seconds, after its last attempt).
-- Fresh rows go first, oldest first; rows that failed before go after them,
-- least recently tried first, so neither a persistently failing event nor
-- one whose publish keeps timing out (which ends the batch) can starve the
-- rest. The pending partial index holds every candidate.
-- name: ClaimPending :many
SELECT id, event_type, payload, created_at, attempts
FROM event_outbox
WHERE published_at IS NULL
  AND dead_lettered_at IS NULL
  AND (last_attempt_at IS NULL
       OR last_attempt_at <= now() - make_interval(secs => least(
              sqlc.arg(backoff_base_seconds)::float8 * power(2, least(greatest(attempts, 1), 40) - 1),
              sqlc.arg(backoff_max_seconds)::float8)))
ORDER BY (last_error IS NOT NULL), CASE WHEN last_error IS NULL THEN created_at ELSE coalesce(last_attempt_at, created_at) END
LIMIT sqlc.arg(batch_limit)::int
FOR UPDATE SKIP LOCKED;

-- name: MarkPublished :exec
UPDATE event_outbox
SET published_at = now(), last_error = NULL
WHERE id = sqlc.arg(id) AND published_at IS NULL AND dead_lettered_at IS NULL;

-- RecordPublishFailure counts one failed publication of a claimed row with
-- its reason and time, and dead-letters it when this was attempt
-- max_attempts (0: never). It answers the row's attempts and whether it is
-- now dead-lettered.
-- name: RecordPublishFailure :one
UPDATE event_outbox
SET last_error = sqlc.arg(last_error),
    attempts = attempts + 1,
    last_attempt_at = clock_timestamp(),
    dead_lettered_at = CASE WHEN sqlc.arg(max_attempts)::int > 0 AND attempts + 1 >= sqlc.arg(max_attempts)::int
                            THEN now() END
WHERE id = sqlc.arg(id) AND published_at IS NULL AND dead_lettered_at IS NULL
RETURNING attempts, (dead_lettered_at IS NOT NULL)::bool AS dead_lettered;

-- RecordPublishTimeout records a publish the broker did not confirm in
-- time: the reason and time, but no attempt (an unanswering broker says
-- nothing about the row).
-- name: RecordPublishTimeout :exec
UPDATE event_outbox
SET last_error = sqlc.arg(last_error), last_attempt_at = clock_timestamp()
WHERE id = sqlc.arg(id) AND published_at IS NULL AND dead_lettered_at IS NULL;

-- DeadLetter dead-letters a claimed row that can never be published (a
-- malformed envelope) at once: it is counted as an attempt, keeps the
-- reason, and is never stamped published.
-- name: DeadLetter :execrows
UPDATE event_outbox
SET last_error = sqlc.arg(last_error), attempts = attempts + 1, last_attempt_at = now(), dead_lettered_at = now()
WHERE id = sqlc.arg(id) AND published_at IS NULL AND dead_lettered_at IS NULL;

-- DeadLetterStats is what the dead-letter gauge shows: the dead-lettered
-- rows (a subset of the unpublished ones, read through the pending index).
-- name: DeadLetterStats :one
SELECT count(*)::bigint AS dead_letters
FROM event_outbox
WHERE published_at IS NULL AND dead_lettered_at IS NOT NULL;

-- ListDeadLetters lists up to row_limit dead letters, oldest dead letter
-- first ((dead_lettered_at, id) order), after the dead letter after_id when
-- set, with their ages by the database clock. The payload is not listed (it
-- may name a person): only its size.
-- name: ListDeadLetters :many
SELECT id, event_type, created_at, attempts, last_error, last_attempt_at, dead_lettered_at,
       retried_by, retried_at,
       octet_length(payload::text)::bigint AS payload_bytes,
       (extract(epoch FROM now()) - extract(epoch FROM created_at))::float8 AS age_seconds,
       (extract(epoch FROM now()) - extract(epoch FROM dead_lettered_at))::float8 AS dead_seconds
FROM event_outbox
WHERE published_at IS NULL AND dead_lettered_at IS NOT NULL
  AND (sqlc.narg(after_id)::uuid IS NULL
       OR (dead_lettered_at, id) > (SELECT a.dead_lettered_at, a.id FROM event_outbox AS a
                                    WHERE a.id = sqlc.narg(after_id)::uuid AND a.dead_lettered_at IS NOT NULL))
ORDER BY dead_lettered_at, id
LIMIT sqlc.arg(row_limit)::int;

-- OutboxRowState says where an outbox row is: published, dead-lettered or
-- pending (no row: it does not exist, or was swept).
-- name: OutboxRowState :one
SELECT (published_at IS NOT NULL)::bool AS published, (dead_lettered_at IS NOT NULL)::bool AS dead_lettered
FROM event_outbox
WHERE id = sqlc.arg(id);

-- RetryDeadLetter returns one dead letter to the drain: attempts reset,
-- the dead-letter stamp cleared, who and when recorded. last_error stays
-- (the row then waits behind fresh rows, as a failed one does). The
-- predicate is repeated here, at the statement that acts: a row that is no
-- longer a dead letter is not touched.
-- name: RetryDeadLetter :one
UPDATE event_outbox
SET dead_lettered_at = NULL, attempts = 0, last_attempt_at = NULL,
    retried_by = sqlc.arg(actor), retried_at = now()
WHERE id = sqlc.arg(id) AND published_at IS NULL AND dead_lettered_at IS NOT NULL
RETURNING id, event_type, created_at, last_error, retried_at;

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
SET published_at = NULL, last_error = NULL, attempts = 0, last_attempt_at = NULL
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

-- PendingStats is what the outbox gauges show: the rows the drain still
-- publishes (unpublished, not dead-lettered: a dead letter is never backlog)
-- and the age of the oldest one (0 when none), by the database clock, read
-- through the drain's partial index on unpublished rows.
-- name: PendingStats :one
SELECT count(*)::bigint AS pending,
       COALESCE(extract(epoch FROM now()) - extract(epoch FROM min(created_at)), 0)::float8 AS oldest_age_seconds
FROM event_outbox
WHERE published_at IS NULL AND dead_lettered_at IS NULL;
