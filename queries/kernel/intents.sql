-- Upload intents (migrations/archive/00005, ADR-069).

-- RecordUploadIntents records the objects a piece of work is about to
-- write; a retry of the same work (an expungement's successor has a
-- deterministic key) finds its intent already there.
-- name: RecordUploadIntents :exec
INSERT INTO archive_upload_intents (object_key, work, work_id, table_name, recorded_by)
SELECT k, sqlc.arg(work)::text, sqlc.arg(work_id)::uuid, sqlc.arg(table_name)::text, sqlc.arg(recorded_by)::text
FROM unnest(sqlc.arg(keys)::text[]) AS k
ON CONFLICT (object_key) DO NOTHING;

-- ClearUploadIntents deletes a booking's intents, in the booking's
-- transaction; the caller checks that it deleted every one (an intent
-- missing was swept: its objects are gone).
-- name: ClearUploadIntents :execrows
DELETE FROM archive_upload_intents WHERE object_key = ANY (sqlc.arg(keys)::text[]);

-- LockOrphanIntents locks up to lim intents nobody else holds (a booking
-- in progress holds its own), oldest first.
-- name: LockOrphanIntents :many
SELECT object_key, work, work_id, table_name, recorded_at
FROM archive_upload_intents
ORDER BY recorded_at, object_key
LIMIT sqlc.arg(lim)
FOR UPDATE SKIP LOCKED;

-- DeleteUploadIntent deletes one swept intent (locked by the sweep).
-- name: DeleteUploadIntent :execrows
DELETE FROM archive_upload_intents WHERE object_key = sqlc.arg(object_key);

-- CountUploadIntents counts the intents of the given tables: objects
-- written and not booked.
-- name: CountUploadIntents :one
SELECT count(*) FROM archive_upload_intents WHERE table_name = ANY (sqlc.arg(tables)::text[]);
