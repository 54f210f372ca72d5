-- Transport sweep batch deletes. Each deletes at most batch_limit rows that are
-- older than window_days by the DATABASE clock, and the outer DELETE repeats
-- the eligibility predicate: a row changed between the inner selection and the
-- delete (a replay re-nulling published_at, say) is re-checked and kept.
-- now() is fixed for the statement, so both cutoffs are the same instant.

-- name: DeletePublishedOutboxBatch :execrows
DELETE FROM event_outbox
WHERE ctid = ANY (ARRAY(
        SELECT o.ctid FROM event_outbox AS o
        WHERE o.published_at IS NOT NULL
          AND o.created_at < now() - make_interval(days => sqlc.arg(window_days)::int)
        LIMIT sqlc.arg(batch_limit)::int))
  AND published_at IS NOT NULL
  AND created_at < now() - make_interval(days => sqlc.arg(window_days)::int);

-- name: DeleteInboxBatch :execrows
DELETE FROM event_inbox
WHERE ctid = ANY (ARRAY(
        SELECT i.ctid FROM event_inbox AS i
        WHERE i.received_at < now() - make_interval(days => sqlc.arg(window_days)::int)
        LIMIT sqlc.arg(batch_limit)::int))
  AND received_at < now() - make_interval(days => sqlc.arg(window_days)::int);
