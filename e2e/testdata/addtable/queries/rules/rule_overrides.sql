-- rule_overrides archive-then-prune, in the shape of archive.sql.

-- name: SelectRuleOverridesBatch :many
SELECT s.id, s.at_key, s.at::timestamptz AS at, s.doc_bytes,
       (s.running > sqlc.arg(max_bytes)::bigint)::boolean AS withheld,
       (CASE WHEN s.running <= sqlc.arg(max_bytes)::bigint THEN s.doc ELSE '' END)::text AS doc
FROM (
    SELECT o.id, o.overridden_at AS ord_at,
           o.overridden_at::text AS at_key,
           LEAST(GREATEST(o.overridden_at, '0001-01-01 00:00:00+00'::timestamptz),
                 '9999-12-31 23:59:59.999999+00'::timestamptz) AS at,
           j.doc,
           (octet_length(j.doc) + 1)::bigint AS doc_bytes,
           sum(octet_length(j.doc) + 1) OVER (ORDER BY o.overridden_at, o.id ROWS UNBOUNDED PRECEDING)::bigint AS running
    FROM rule_overrides AS o
    CROSS JOIN LATERAL (SELECT to_jsonb(o)::text AS doc OFFSET 0) AS j
    WHERE o.overridden_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int)
      AND (o.overridden_at, o.id) > (sqlc.arg(after_key)::text::timestamptz, sqlc.arg(after_id)::uuid)
    ORDER BY o.overridden_at, o.id
    LIMIT sqlc.arg(batch_limit)::int
) AS s
WHERE s.running - s.doc_bytes < sqlc.arg(max_bytes)::bigint
ORDER BY s.ord_at, s.id;

-- name: DeleteRuleOverridesByIDs :execrows
DELETE FROM rule_overrides
WHERE id = ANY (sqlc.arg(ids)::uuid[])
  AND overridden_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int);
