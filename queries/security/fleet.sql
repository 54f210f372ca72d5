-- security's fleet ledger (archive_records) and audit trail writes.

-- InsertArchiveRecord books one archive of any service in the fleet ledger.
-- A replay of an archive already booked inserts nothing (0 rows): the
-- caller compares it with the booked row (divergence); the row is
-- never overwritten.
-- name: InsertArchiveRecord :execrows
INSERT INTO archive_records (
    archive_id, source_service, table_name, data_key, manifest_key, data_sha256, record_count,
    store_endpoint, store_bucket, first_record_id, last_record_id,
    first_record_at, last_record_at, hot_window_days, archived_at, archived_by
) VALUES (
    sqlc.arg(archive_id), sqlc.arg(source_service), sqlc.arg(table_name), sqlc.arg(data_key),
    sqlc.arg(manifest_key), sqlc.arg(data_sha256), sqlc.arg(record_count), sqlc.arg(store_endpoint),
    sqlc.arg(store_bucket), sqlc.arg(first_record_id), sqlc.arg(last_record_id),
    sqlc.arg(first_record_at), sqlc.arg(last_record_at), sqlc.arg(hot_window_days),
    sqlc.arg(archived_at), sqlc.arg(archived_by)
)
ON CONFLICT (archive_id) DO NOTHING;

-- GetArchiveRecord returns the booked facts of one archive (for the
-- divergence comparison of a replay).
-- name: GetArchiveRecord :one
SELECT archive_id, source_service, table_name, data_key, manifest_key, data_sha256, record_count,
       store_endpoint, store_bucket, first_record_id, last_record_id,
       first_record_at, last_record_at, hot_window_days, archived_at, archived_by
FROM archive_records
WHERE archive_id = sqlc.arg(archive_id);

-- InsertAuditLog records one entry of the audit trail.
-- name: InsertAuditLog :exec
INSERT INTO audit_log (actor, action, subject_id, detail)
VALUES (sqlc.arg(actor), sqlc.arg(action), sqlc.arg(subject_id), sqlc.arg(detail));

-- InsertDeadLetterAudit records one dead-lettered event with the last error
-- that kept it from being handled.
-- name: InsertDeadLetterAudit :exec
INSERT INTO dead_letter_audit (event_type, payload, reason)
VALUES (sqlc.arg(event_type), sqlc.arg(payload), sqlc.arg(reason));

-- The fleet copies follow their producer's lifecycle (validated events; a
-- source only ever changes its own rows).

-- Each applies only an event newer than the row's last applied one
-- (lifecycle_at, security migration 00002): a stale event changes nothing.

-- ApplyFleetRetention sets an unpurged fleet row's retention date.
-- name: ApplyFleetRetention :execrows
UPDATE archive_records
SET retention_until = sqlc.arg(retention_until)::date, lifecycle_at = sqlc.arg(at)
WHERE archive_id = sqlc.arg(archive_id) AND source_service = sqlc.arg(source_service) AND purged_at IS NULL
  AND (lifecycle_at IS NULL OR lifecycle_at < sqlc.arg(at));

-- ApplyFleetLegalHold sets a fleet row's hold state: whether it is held,
-- and whether a subject hold covers it (each NULL: unchanged).
-- name: ApplyFleetLegalHold :execrows
UPDATE archive_records
SET legal_hold = COALESCE(sqlc.narg(legal_hold)::boolean, legal_hold),
    subject_hold = COALESCE(sqlc.narg(subject_hold)::boolean, subject_hold),
    lifecycle_at = sqlc.arg(at)
WHERE archive_id = sqlc.arg(archive_id) AND source_service = sqlc.arg(source_service)
  AND (lifecycle_at IS NULL OR lifecycle_at < sqlc.arg(at));

-- ApplyFleetPurged stamps the fleet rows of destroyed archives.
-- name: ApplyFleetPurged :execrows
UPDATE archive_records
SET purged_at = sqlc.arg(purged_at), purged_by = sqlc.arg(purged_by), lifecycle_at = sqlc.arg(purged_at)
WHERE archive_id = ANY (sqlc.arg(archive_ids)::uuid[]) AND source_service = sqlc.arg(source_service) AND purged_at IS NULL
  AND (lifecycle_at IS NULL OR lifecycle_at < sqlc.arg(purged_at));

-- StaleFleetRows counts the given archives' fleet rows whose last applied
-- lifecycle event is at or after at (what a stale event did not change).
-- name: StaleFleetRows :one
SELECT count(*)::bigint FROM archive_records
WHERE archive_id = ANY (sqlc.arg(archive_ids)::uuid[]) AND source_service = sqlc.arg(source_service)
  AND lifecycle_at >= sqlc.arg(at);

-- ReleaseInboxClaim gives back an event id an event could not prove it
-- owns (its signature was refused): the refusal is recorded, but the id
-- stays free for the genuine event, which a forgery must not shadow.
-- name: ReleaseInboxClaim :exec
DELETE FROM event_inbox WHERE event_id = sqlc.arg(event_id);

-- ApplyFleetSuperseded stamps the fleet row of an archive an expungement
-- rewrote: purged by the approver, with the order and its successor.
-- name: ApplyFleetSuperseded :execrows
UPDATE archive_records
SET purged_at = sqlc.arg(purged_at), purged_by = sqlc.arg(purged_by), lifecycle_at = sqlc.arg(purged_at),
    expunge_id = sqlc.arg(expunge_id), superseded_by = sqlc.narg(superseded_by)
WHERE archive_id = sqlc.arg(archive_id) AND source_service = sqlc.arg(source_service) AND purged_at IS NULL
  AND (lifecycle_at IS NULL OR lifecycle_at < sqlc.arg(purged_at));
