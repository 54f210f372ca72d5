-- exchange_send_jobs sweep: terminal ('sent', 'failed') jobs completed more
-- than window_days ago by the database clock. Pending, in-flight and
-- dead-letter jobs never match. The outer DELETE repeats the predicate.

-- name: DeleteTerminalSendJobsBatch :execrows
DELETE FROM exchange_send_jobs
WHERE ctid = ANY (ARRAY(
        SELECT j.ctid FROM exchange_send_jobs AS j
        WHERE j.status IN ('sent', 'failed')
          AND j.completed_at < now() - make_interval(days => sqlc.arg(window_days)::int)
        LIMIT sqlc.arg(batch_limit)::int))
  AND status IN ('sent', 'failed')
  AND completed_at < now() - make_interval(days => sqlc.arg(window_days)::int);
