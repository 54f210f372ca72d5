-- payment_notifications sweep: sent and failed notifications older than
-- window_days by their swept_at (the database clock); the outer DELETE
-- repeats the predicate.

-- name: DeleteOldPaymentNotificationsBatch :execrows
DELETE FROM payment_notifications
WHERE ctid = ANY (ARRAY(
        SELECT n.ctid FROM payment_notifications AS n
        WHERE n.status IN ('sent', 'failed')
          AND n.swept_at < now() - make_interval(days => sqlc.arg(window_days)::int)
        LIMIT sqlc.arg(batch_limit)::int))
  AND status IN ('sent', 'failed')
  AND swept_at < now() - make_interval(days => sqlc.arg(window_days)::int);
