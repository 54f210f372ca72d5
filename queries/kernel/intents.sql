-- Upload intents (migrations/archive/00005, ADR-069).

-- RecordUploadIntents records the objects a piece of work is about to
-- write. A retry of the same work (an expungement's successor has a
-- deterministic key) finds its intent there, perhaps swept: it is a new
-- upload of the same bytes, so the intent is live again.
-- name: RecordUploadIntents :exec
INSERT INTO archive_upload_intents (object_key, work, work_id, table_name, recorded_by)
SELECT k, sqlc.arg(work)::text, sqlc.arg(work_id)::uuid, sqlc.arg(table_name)::text, sqlc.arg(recorded_by)::text
FROM unnest(sqlc.arg(keys)::text[]) AS k
ON CONFLICT (object_key) DO UPDATE
SET destroyed_at = NULL, recorded_at = now(), recorded_by = EXCLUDED.recorded_by
WHERE archive_upload_intents.work = EXCLUDED.work AND archive_upload_intents.work_id = EXCLUDED.work_id;

-- ClearUploadIntents deletes a booking's intents, in the booking's
-- transaction; the caller checks that it deleted every one (an intent
-- missing was swept: its objects are gone).
-- name: ClearUploadIntents :execrows
DELETE FROM archive_upload_intents WHERE object_key = ANY (sqlc.arg(keys)::text[]) AND destroyed_at IS NULL;

-- LockOrphanIntents locks up to lim intents nobody else holds (a booking
-- in progress holds its own), in key order after a key; expired says the
-- late-upload window (late_seconds) has passed since the first destroy.
-- An intent whose key an unpurged ledger row names is never an orphan's
-- (a booking the restore forgot and reconcile booked again): not locked.
-- name: LockOrphanIntents :many
SELECT object_key, work, work_id, table_name, recorded_at, destroyed_at,
       (destroyed_at IS NOT NULL AND destroyed_at < now() - make_interval(secs => sqlc.arg(late_seconds)::float8))::boolean AS expired
FROM archive_upload_intents AS i
WHERE object_key > sqlc.arg(after)::text
  AND NOT EXISTS (SELECT 1 FROM archive_ledger AS l WHERE l.data_key = i.object_key AND l.purged_at IS NULL)
  AND NOT EXISTS (SELECT 1 FROM archive_ledger AS l WHERE l.manifest_key = i.object_key AND l.purged_at IS NULL)
ORDER BY object_key
LIMIT sqlc.arg(lim)
FOR UPDATE SKIP LOCKED;

-- ClearBookedIntents deletes the intents whose key an unpurged ledger row
-- books: their booking committed (an intent a restore brought back after
-- reconcile booked its objects again).
-- name: ClearBookedIntents :execrows
DELETE FROM archive_upload_intents AS i
WHERE EXISTS (SELECT 1 FROM archive_ledger AS l WHERE l.data_key = i.object_key AND l.purged_at IS NULL)
   OR EXISTS (SELECT 1 FROM archive_ledger AS l WHERE l.manifest_key = i.object_key AND l.purged_at IS NULL);

-- MarkIntentDestroyed records a sweep's first destroy of an intent's object.
-- name: MarkIntentDestroyed :exec
UPDATE archive_upload_intents SET destroyed_at = now() WHERE object_key = sqlc.arg(object_key) AND destroyed_at IS NULL;

-- DeleteUploadIntent deletes one swept intent (locked by the sweep).
-- name: DeleteUploadIntent :execrows
DELETE FROM archive_upload_intents WHERE object_key = sqlc.arg(object_key);

-- CountUploadIntents counts the intents of the given tables whose object
-- may still exist: not destroyed, or destroyed within the late-upload
-- window (late_seconds).
-- Intents of the work except_work_id (a retried order's own successors:
-- it writes the same bytes under the same keys again) are not counted.
-- name: CountUploadIntents :one
SELECT count(*) FROM archive_upload_intents
WHERE table_name = ANY (sqlc.arg(tables)::text[])
  AND (destroyed_at IS NULL OR destroyed_at >= now() - make_interval(secs => sqlc.arg(late_seconds)::float8))
  AND work_id IS DISTINCT FROM sqlc.narg(except_work_id)::uuid;
