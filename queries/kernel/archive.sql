-- Archive-then-prune checks the kernel runs for every archived table.

-- InsertOnlyTriggers lists, of the given tables, those that exist and have
-- an enabled BEFORE UPDATE trigger calling retention_refuse_update()
-- (archived tables are insert-only, enforced by the database: ADR-058).
-- tgtype bits: 2 = BEFORE, 16 = UPDATE.
-- name: InsertOnlyTriggers :many
SELECT c.relname::text AS table_name
FROM pg_catalog.pg_trigger AS t
JOIN pg_catalog.pg_class AS c ON c.oid = t.tgrelid
JOIN pg_catalog.pg_proc AS p ON p.oid = t.tgfoid
WHERE c.oid = ANY (
        SELECT to_regclass(n)::oid FROM unnest(sqlc.arg(table_names)::text[]) AS n)
  AND p.proname = 'retention_refuse_update'
  AND t.tgenabled <> 'D'
  AND (t.tgtype::int & 2) <> 0
  AND (t.tgtype::int & 16) <> 0;

-- InsertArchiveLedger books one archive in the service's local ledger,
-- inside the transaction that deletes the archived rows (archive.Bookkeeper).
-- An active legal hold whose table and record-time range cover the new
-- archive holds it from the start.
-- name: InsertArchiveLedger :exec
INSERT INTO archive_ledger (
    archive_id, table_name, data_key, manifest_key, data_sha256, record_count,
    store_endpoint, store_bucket, first_record_id, last_record_id,
    first_record_at, last_record_at, hot_window_days, archived_at, archived_by, legal_hold
) VALUES (
    sqlc.arg(archive_id), sqlc.arg(table_name), sqlc.arg(data_key), sqlc.arg(manifest_key),
    sqlc.arg(data_sha256), sqlc.arg(record_count), sqlc.arg(store_endpoint), sqlc.arg(store_bucket),
    sqlc.arg(first_record_id), sqlc.arg(last_record_id), sqlc.arg(first_record_at),
    sqlc.arg(last_record_at), sqlc.arg(hot_window_days), sqlc.arg(archived_at), sqlc.arg(archived_by),
    archive_is_held(sqlc.arg(archive_id), sqlc.arg(table_name), sqlc.arg(first_record_at), sqlc.arg(last_record_at))
);

-- ArchiveHeld reads whether a just-booked archive is under a legal hold
-- (an active hold covered it when its ledger row was written).
-- name: ArchiveHeld :one
SELECT legal_hold FROM archive_ledger WHERE archive_id = sqlc.arg(archive_id);

-- LockHoldsShared orders an archive's booking with hold placements (see
-- lease.HoldsKey): held until the booking's transaction ends.
-- name: LockHoldsShared :exec
SELECT pg_advisory_xact_lock_shared(sqlc.arg(key)::bigint);

-- InsertArchiveSubjects indexes a just-booked archive by the keyed hashes of
-- the subjects its rows are about (migrations/archive 00003), in the
-- archive's own transaction.
-- name: InsertArchiveSubjects :exec
INSERT INTO archive_subjects (archive_id, subject_hashes)
VALUES (sqlc.arg(archive_id)::uuid, ARRAY(SELECT DISTINCT h.hash FROM unnest(sqlc.arg(hashes)::bytea[]) AS h(hash) ORDER BY h.hash))
ON CONFLICT (archive_id) DO UPDATE SET subject_hashes = EXCLUDED.subject_hashes;

-- MarkSubjectsIndexed records that an archive's subjects are all in the
-- index, then (a second statement: it must see this one) RefreshArchiveHold
-- recomputes its legal_hold, which an active subject hold set while the
-- archive was not yet indexed.
-- name: MarkSubjectsIndexed :exec
UPDATE archive_ledger SET subjects_indexed = true WHERE archive_id = sqlc.arg(archive_id);

-- name: RefreshArchiveHold :one
UPDATE archive_ledger AS l
SET legal_hold = archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at)
WHERE l.archive_id = sqlc.arg(archive_id)
RETURNING l.legal_hold, l.data_key, l.manifest_key, (l.purged_at IS NOT NULL)::boolean AS purged;

-- BindSubjectKey records the subject key's fingerprint if none is yet, and
-- returns the one recorded (the caller refuses a key that differs).
-- name: BindSubjectKey :one
WITH ins AS (
    INSERT INTO archive_subject_key (fingerprint) VALUES (sqlc.arg(fingerprint))
    ON CONFLICT (singleton) DO NOTHING
    RETURNING fingerprint
)
SELECT fingerprint FROM ins
UNION ALL
SELECT fingerprint FROM archive_subject_key
LIMIT 1;

-- SubjectKeyFingerprint reads the bound key's fingerprint (a second
-- statement after BindSubjectKey found another's insert it could not see).
-- name: SubjectKeyFingerprint :one
SELECT fingerprint FROM archive_subject_key;

-- SubjectDeclaration reads the declaration a table's archives were indexed
-- by.
-- name: SubjectDeclaration :one
SELECT declaration FROM archive_subject_declarations WHERE table_name = sqlc.arg(table_name);

-- RecordSubjectDeclaration records a table's current declaration.
-- name: RecordSubjectDeclaration :exec
INSERT INTO archive_subject_declarations (table_name, declaration) VALUES (sqlc.arg(table_name), sqlc.arg(declaration))
ON CONFLICT (table_name) DO UPDATE SET declaration = EXCLUDED.declaration, declared_at = now();

-- UnindexTable marks a table's unpurged archives unindexed (its
-- declaration changed): the backfill re-indexes them.
-- name: UnindexTable :execrows
UPDATE archive_ledger SET subjects_indexed = false
WHERE table_name = sqlc.arg(table_name) AND subjects_indexed AND purged_at IS NULL;

-- PassCursor reads the table the next archive pass offers a batch first.
-- name: PassCursor :many
SELECT next_table FROM archive_pass_cursor;

-- SetPassCursor records the table the next archive pass offers a batch first.
-- name: SetPassCursor :exec
INSERT INTO archive_pass_cursor (singleton, next_table) VALUES (true, sqlc.arg(next_table))
ON CONFLICT (singleton) DO UPDATE SET next_table = EXCLUDED.next_table, updated_at = now();
