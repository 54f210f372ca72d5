-- exchange_webhook_attempts sweep: finished attempts older than window_days
-- by the database clock; the outer DELETE repeats the predicate.

-- name: DeleteFinishedWebhookAttemptsBatch :execrows
DELETE FROM exchange_webhook_attempts
WHERE ctid = ANY (ARRAY(
        SELECT a.ctid FROM exchange_webhook_attempts AS a
        WHERE a.status IN ('delivered', 'abandoned')
          AND a.finished_at < now() - make_interval(days => sqlc.arg(window_days)::int)
        LIMIT sqlc.arg(batch_limit)::int))
  AND status IN ('delivered', 'abandoned')
  AND finished_at < now() - make_interval(days => sqlc.arg(window_days)::int);
