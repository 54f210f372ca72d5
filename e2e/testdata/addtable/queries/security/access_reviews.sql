-- access_reviews archive-then-prune, in the shape of archive.sql.

-- name: SelectAccessReviewsBatch :many
SELECT s.id, s.at_key, s.at::timestamptz AS at, s.doc_bytes,
       (s.running > sqlc.arg(max_bytes)::bigint)::boolean AS withheld,
       (CASE WHEN s.running <= sqlc.arg(max_bytes)::bigint THEN s.doc ELSE '' END)::text AS doc
FROM (
    SELECT r.id, r.reviewed_at AS ord_at,
           r.reviewed_at::text AS at_key,
           LEAST(GREATEST(r.reviewed_at, '0001-01-01 00:00:00+00'::timestamptz),
                 '9999-12-31 23:59:59.999999+00'::timestamptz) AS at,
           j.doc,
           (octet_length(j.doc) + 1)::bigint AS doc_bytes,
           sum(octet_length(j.doc) + 1) OVER (ORDER BY r.reviewed_at, r.id ROWS UNBOUNDED PRECEDING)::bigint AS running
    FROM access_reviews AS r
    CROSS JOIN LATERAL (SELECT to_jsonb(r)::text AS doc OFFSET 0) AS j
    WHERE r.reviewed_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int)
      AND (r.reviewed_at, r.id) > (sqlc.arg(after_key)::text::timestamptz, sqlc.arg(after_id)::uuid)
    ORDER BY r.reviewed_at, r.id
    LIMIT sqlc.arg(batch_limit)::int
) AS s
WHERE s.running - s.doc_bytes < sqlc.arg(max_bytes)::bigint
ORDER BY s.ord_at, s.id;

-- name: DeleteAccessReviewsByIDs :execrows
DELETE FROM access_reviews
WHERE id = ANY (sqlc.arg(ids)::uuid[])
  AND reviewed_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int);
