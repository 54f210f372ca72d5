-- subsidy_reconcile_queue sweep: rows processed more than window_days ago by
-- the database clock. Unprocessed and dead-lettered rows never match. The
-- outer DELETE repeats the predicate.

-- name: DeleteProcessedReconcileBatch :execrows
DELETE FROM subsidy_reconcile_queue
WHERE ctid = ANY (ARRAY(
        SELECT q.ctid FROM subsidy_reconcile_queue AS q
        WHERE q.processed_at IS NOT NULL
          AND q.dead_lettered_at IS NULL
          AND q.processed_at < now() - make_interval(days => sqlc.arg(window_days)::int)
        LIMIT sqlc.arg(batch_limit)::int))
  AND processed_at IS NOT NULL
  AND dead_lettered_at IS NULL
  AND processed_at < now() - make_interval(days => sqlc.arg(window_days)::int);
