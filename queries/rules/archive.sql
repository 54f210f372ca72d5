-- rule_evaluations archive-then-prune (kernel archive.TableSpec).

-- SelectRuleEvaluationsBatch returns up to batch_limit rows older than the
-- hot window (database clock), oldest first, after the (evaluated_at, id)
-- cursor, each with its to_jsonb text exactly as PostgreSQL renders it.
-- name: SelectRuleEvaluationsBatch :many
SELECT e.id, e.evaluated_at, to_jsonb(e)::text AS doc
FROM rule_evaluations AS e
WHERE e.evaluated_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int)
  AND (e.evaluated_at, e.id) > (sqlc.arg(after_at)::timestamptz, sqlc.arg(after_id)::uuid)
ORDER BY e.evaluated_at, e.id
LIMIT sqlc.arg(batch_limit)::int;

-- DeleteRuleEvaluationsByIDs deletes archived rows by id, re-checking the
-- hot-window predicate at the destroying statement.
-- name: DeleteRuleEvaluationsByIDs :execrows
DELETE FROM rule_evaluations
WHERE id = ANY (sqlc.arg(ids)::uuid[])
  AND evaluated_at < now() - make_interval(days => sqlc.arg(hot_window_days)::int);

-- name: InsertArchiveLedger :exec
INSERT INTO archive_ledger (
    archive_id, table_name, data_key, manifest_key, data_sha256, record_count,
    store_endpoint, store_bucket, first_record_id, last_record_id,
    first_record_at, last_record_at, hot_window_days, archived_at, archived_by
) VALUES (
    sqlc.arg(archive_id), sqlc.arg(table_name), sqlc.arg(data_key), sqlc.arg(manifest_key),
    sqlc.arg(data_sha256), sqlc.arg(record_count), sqlc.arg(store_endpoint), sqlc.arg(store_bucket),
    sqlc.arg(first_record_id), sqlc.arg(last_record_id), sqlc.arg(first_record_at),
    sqlc.arg(last_record_at), sqlc.arg(hot_window_days), sqlc.arg(archived_at), sqlc.arg(archived_by)
);
