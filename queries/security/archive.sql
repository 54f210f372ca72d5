-- security's archived tables (kernel archive.TableSpec): audit_log by
-- occurred_at and dead_letter_audit by dlq_received_at. Each selection is
-- the shape of queries/rules/archive.sql (byte-capped at max_bytes, at_key the
-- exact cursor, at clamped for the manifest; see the comment there); each
-- delete re-checks the hot window at the destroying statement.

-- SelectAuditLogBatch: the byte-capped batch of audit_log older than the hot window.
-- name: SelectAuditLogBatch :many
SELECT s.id, s.at_key, s.at::timestamptz AS at, s.doc_bytes,
       (s.running > sqlc.arg(max_bytes)::bigint)::boolean AS withheld,
       (CASE WHEN s.running <= sqlc.arg(max_bytes)::bigint THEN s.doc ELSE '' END)::text AS doc
FROM (
    SELECT a.id, a.occurred_at AS ord_at,
           a.occurred_at::text AS at_key,
           LEAST(GREATEST(a.occurred_at, '0001-01-01 00:00:00+00'::timestamptz),
                 '9999-12-31 23:59:59.999999+00'::timestamptz) AS at,
           j.doc,
           (octet_length(j.doc) + 1)::bigint AS doc_bytes,
           sum(octet_length(j.doc) + 1) OVER (ORDER BY a.occurred_at, a.id ROWS UNBOUNDED PRECEDING)::bigint AS running
    FROM audit_log AS a
    -- OFFSET 0: to_jsonb once per row (queries/rules/archive.sql).
    CROSS JOIN LATERAL (SELECT to_jsonb(a)::text AS doc OFFSET 0) AS j
    WHERE a.occurred_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int)
      AND (a.occurred_at, a.id) > (sqlc.arg(after_key)::text::timestamptz, sqlc.arg(after_id)::uuid)
    ORDER BY a.occurred_at, a.id
    LIMIT sqlc.arg(batch_limit)::int
) AS s
WHERE s.running - s.doc_bytes < sqlc.arg(max_bytes)::bigint
ORDER BY s.ord_at, s.id;

-- DeleteAuditLogByIDs deletes archived rows by id, re-checking the hot window.
-- name: DeleteAuditLogByIDs :execrows
DELETE FROM audit_log
WHERE id = ANY (sqlc.arg(ids)::uuid[])
  AND occurred_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int);

-- SelectDeadLetterAuditBatch: the byte-capped batch of dead_letter_audit older than the hot window.
-- name: SelectDeadLetterAuditBatch :many
SELECT s.id, s.at_key, s.at::timestamptz AS at, s.doc_bytes,
       (s.running > sqlc.arg(max_bytes)::bigint)::boolean AS withheld,
       (CASE WHEN s.running <= sqlc.arg(max_bytes)::bigint THEN s.doc ELSE '' END)::text AS doc
FROM (
    SELECT d.id, d.dlq_received_at AS ord_at,
           d.dlq_received_at::text AS at_key,
           LEAST(GREATEST(d.dlq_received_at, '0001-01-01 00:00:00+00'::timestamptz),
                 '9999-12-31 23:59:59.999999+00'::timestamptz) AS at,
           j.doc,
           (octet_length(j.doc) + 1)::bigint AS doc_bytes,
           sum(octet_length(j.doc) + 1) OVER (ORDER BY d.dlq_received_at, d.id ROWS UNBOUNDED PRECEDING)::bigint AS running
    FROM dead_letter_audit AS d
    -- OFFSET 0: to_jsonb once per row (queries/rules/archive.sql).
    CROSS JOIN LATERAL (SELECT to_jsonb(d)::text AS doc OFFSET 0) AS j
    WHERE d.dlq_received_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int)
      AND (d.dlq_received_at, d.id) > (sqlc.arg(after_key)::text::timestamptz, sqlc.arg(after_id)::uuid)
    ORDER BY d.dlq_received_at, d.id
    LIMIT sqlc.arg(batch_limit)::int
) AS s
WHERE s.running - s.doc_bytes < sqlc.arg(max_bytes)::bigint
ORDER BY s.ord_at, s.id;

-- DeleteDeadLetterAuditByIDs deletes archived rows by id, re-checking the hot window.
-- name: DeleteDeadLetterAuditByIDs :execrows
DELETE FROM dead_letter_audit
WHERE id = ANY (sqlc.arg(ids)::uuid[])
  AND dlq_received_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int);
