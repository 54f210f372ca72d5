-- rule_evaluations archive-then-prune (kernel archive.TableSpec).

-- SelectRuleEvaluationsBatch returns up to batch_limit rows older than the
-- hot window (database clock), oldest first, after the (evaluated_at, id)
-- cursor, each with its to_jsonb text exactly as PostgreSQL renders it, and
-- stops at max_bytes of NDJSON (memory is bounded by the
-- byte cap, not by batch_size x row size):
--   - doc_bytes is the row's NDJSON line length (its text plus the newline);
--     running sums them in order;
--   - only rows that START within the cap are returned; the one that would
--     cross it comes without its doc (withheld, doc ''), so the engine learns that the
--     batch is cut there (or that a single row alone exceeds the cap: it is
--     quarantined) without ever receiving more than max_bytes of documents;
--   - at_key is evaluated_at as the database's own text ('-infinity', BC
--     dates included): the cursor is that text, so every timestamp the
--     column can hold is reached and ordered exactly; at is evaluated_at
--     clamped into years 1..9999, for the manifest and ledger (JSON and Go
--     cannot carry infinity or BC).
-- name: SelectRuleEvaluationsBatch :many
SELECT s.id, s.at_key, s.at::timestamptz AS at, s.doc_bytes,
       (s.running > sqlc.arg(max_bytes)::bigint)::boolean AS withheld,
       (CASE WHEN s.running <= sqlc.arg(max_bytes)::bigint THEN s.doc ELSE '' END)::text AS doc
FROM (
    SELECT e.id, e.evaluated_at AS ord_at,
           e.evaluated_at::text AS at_key,
           LEAST(GREATEST(e.evaluated_at, '0001-01-01 00:00:00+00'::timestamptz),
                 '9999-12-31 23:59:59.999999+00'::timestamptz) AS at,
           j.doc,
           (octet_length(j.doc) + 1)::bigint AS doc_bytes,
           sum(octet_length(j.doc) + 1) OVER (ORDER BY e.evaluated_at, e.id ROWS UNBOUNDED PRECEDING)::bigint AS running
    FROM rule_evaluations AS e
    -- OFFSET 0 keeps the subquery from being pulled up: to_jsonb then runs
    -- once per row, not once per use of doc (measured 2.4x slower without).
    CROSS JOIN LATERAL (SELECT to_jsonb(e)::text AS doc OFFSET 0) AS j
    WHERE e.evaluated_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int)
      AND (e.evaluated_at, e.id) > (sqlc.arg(after_key)::text::timestamptz, sqlc.arg(after_id)::uuid)
    ORDER BY e.evaluated_at, e.id
    LIMIT sqlc.arg(batch_limit)::int
) AS s
WHERE s.running - s.doc_bytes < sqlc.arg(max_bytes)::bigint
ORDER BY s.ord_at, s.id;

-- DeleteRuleEvaluationsByIDs deletes archived rows by id, re-checking the
-- hot-window predicate at the destroying statement.
-- name: DeleteRuleEvaluationsByIDs :execrows
DELETE FROM rule_evaluations
WHERE id = ANY (sqlc.arg(ids)::uuid[])
  AND evaluated_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int);
