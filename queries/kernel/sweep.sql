-- Transport sweep batch deletes, keyset style. Each table's rows are taken in
-- the order of a unique sweep key, its age column then its primary key
-- ((created_at, id), (received_at, event_id)), which its sweep index holds
-- (migrations/transport/00003). One batch is two statements:
--
--   1. <Table>SweepBound reads the key of the batch_limit-th eligible row
--      after the cursor (the previous batch's last key; '-infinity' and the
--      nil uuid at the start) from the index alone. No row means fewer than
--      batch_limit remain: the batch takes them all (through = 'infinity').
--   2. The batch delete removes the eligible rows in (after, through]. It
--      reads them through the index once, in key order, and repeats the
--      bound's own subquery, so that however the table changed in between
--      it deletes at most batch_limit rows (its snapshot's first ones after
--      the cursor). The known `through` is there for the planner: with it,
--      the plan is a range scan of the sweep index.
--
-- Both compute their cutoff with the DATABASE clock, and the delete repeats
-- the eligibility predicate: a row changed between the bound and the delete
-- (a replay re-nulling published_at, say) is re-checked and kept. now() is
-- fixed for a statement (and for a transaction: a batch with timeouts runs in
-- its own), so every cutoff of one statement is the same instant.

-- name: OutboxSweepBound :one
SELECT o.created_at, o.id FROM event_outbox AS o
WHERE o.published_at IS NOT NULL
  AND o.created_at < now() - make_interval(days => sqlc.arg(window_days)::int)
  AND (o.created_at, o.id) > (sqlc.arg(after_created_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY o.created_at, o.id
OFFSET sqlc.arg(batch_limit)::int - 1
LIMIT 1;

-- name: DeletePublishedOutboxBatch :execrows
DELETE FROM event_outbox
WHERE published_at IS NOT NULL
  AND created_at < now() - make_interval(days => sqlc.arg(window_days)::int)
  AND (created_at, id) > (sqlc.arg(after_created_at)::timestamptz, sqlc.arg(after_id)::uuid)
  AND (created_at, id) <= (sqlc.arg(through_created_at)::timestamptz, sqlc.arg(through_id)::uuid)
  AND (created_at, id) <= (
        SELECT coalesce(b.created_at, 'infinity'::timestamptz), coalesce(b.id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT o.created_at, o.id FROM event_outbox AS o
            WHERE o.published_at IS NOT NULL
              AND o.created_at < now() - make_interval(days => sqlc.arg(window_days)::int)
              AND (o.created_at, o.id) > (sqlc.arg(after_created_at)::timestamptz, sqlc.arg(after_id)::uuid)
            ORDER BY o.created_at, o.id
            OFFSET sqlc.arg(batch_limit)::int - 1
            LIMIT 1) AS b ON true);

-- The outbox's dead letters (ADR-075): unpublished rows the drain gave up
-- on, aged by dead_lettered_at, swept after
-- outbox.dead_letter_retention_days. Their keyset is (dead_lettered_at, id),
-- read through the pending partial index (every dead letter is unpublished).
-- name: OutboxDeadLetterSweepBound :one
SELECT o.dead_lettered_at, o.id FROM event_outbox AS o
WHERE o.published_at IS NULL AND o.dead_lettered_at IS NOT NULL
  AND o.dead_lettered_at < now() - make_interval(days => sqlc.arg(window_days)::int)
  AND (o.dead_lettered_at, o.id) > (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY o.dead_lettered_at, o.id
OFFSET sqlc.arg(batch_limit)::int - 1
LIMIT 1;

-- name: DeleteDeadLetterOutboxBatch :execrows
DELETE FROM event_outbox
WHERE published_at IS NULL AND dead_lettered_at IS NOT NULL
  AND dead_lettered_at < now() - make_interval(days => sqlc.arg(window_days)::int)
  AND (dead_lettered_at, id) > (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
  AND (dead_lettered_at, id) <= (sqlc.arg(through_at)::timestamptz, sqlc.arg(through_id)::uuid)
  AND (dead_lettered_at, id) <= (
        SELECT coalesce(b.dead_lettered_at, 'infinity'::timestamptz), coalesce(b.id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT o.dead_lettered_at, o.id FROM event_outbox AS o
            WHERE o.published_at IS NULL AND o.dead_lettered_at IS NOT NULL
              AND o.dead_lettered_at < now() - make_interval(days => sqlc.arg(window_days)::int)
              AND (o.dead_lettered_at, o.id) > (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
            ORDER BY o.dead_lettered_at, o.id
            OFFSET sqlc.arg(batch_limit)::int - 1
            LIMIT 1) AS b ON true);

-- name: InboxSweepBound :one
SELECT i.received_at, i.event_id FROM event_inbox AS i
WHERE i.received_at < now() - make_interval(days => sqlc.arg(window_days)::int)
  AND (i.received_at, i.event_id) > (sqlc.arg(after_received_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY i.received_at, i.event_id
OFFSET sqlc.arg(batch_limit)::int - 1
LIMIT 1;

-- name: DeleteInboxBatch :execrows
DELETE FROM event_inbox
WHERE received_at < now() - make_interval(days => sqlc.arg(window_days)::int)
  AND (received_at, event_id) > (sqlc.arg(after_received_at)::timestamptz, sqlc.arg(after_id)::uuid)
  AND (received_at, event_id) <= (sqlc.arg(through_received_at)::timestamptz, sqlc.arg(through_id)::uuid)
  AND (received_at, event_id) <= (
        SELECT coalesce(b.received_at, 'infinity'::timestamptz), coalesce(b.event_id, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT i.received_at, i.event_id FROM event_inbox AS i
            WHERE i.received_at < now() - make_interval(days => sqlc.arg(window_days)::int)
              AND (i.received_at, i.event_id) > (sqlc.arg(after_received_at)::timestamptz, sqlc.arg(after_id)::uuid)
            ORDER BY i.received_at, i.event_id
            OFFSET sqlc.arg(batch_limit)::int - 1
            LIMIT 1) AS b ON true);
