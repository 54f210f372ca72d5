-- Court orders (kernel/courtorder, ADR-067): seals and expungements of a
-- subject, named by its keyed hash (never in clear).

-- SealSubject seals a subject (idempotent: a second seal keeps the first
-- order's row) and says whether this call sealed it.
-- name: SealSubject :one
WITH ins AS (
    INSERT INTO subject_seals (subject_hash, order_ref, reason, sealed_by)
    VALUES (sqlc.arg(subject_hash), sqlc.arg(order_ref), sqlc.arg(reason), sqlc.arg(sealed_by))
    ON CONFLICT (subject_hash) DO NOTHING
    RETURNING order_ref
)
SELECT (SELECT count(*) FROM ins) > 0 AS sealed_now,
       COALESCE((SELECT order_ref FROM ins), (SELECT s.order_ref FROM subject_seals AS s WHERE s.subject_hash = sqlc.arg(subject_hash)))::text AS order_ref;

-- UnsealSubject lifts a seal; no row: it was not sealed.
-- name: UnsealSubject :execrows
DELETE FROM subject_seals WHERE subject_hash = sqlc.arg(subject_hash);

-- SealedHashes lists every sealed subject's keyed hash.
-- name: SealedHashes :many
SELECT subject_hash FROM subject_seals ORDER BY subject_hash;

-- ExpungeArchives lists the unpurged archives of the given tables that the
-- index says hold the subject, with whether a hold the order does not name
-- covers each (such a one blocks the order).
-- name: ExpungeArchives :many
SELECT l.archive_id, l.table_name, l.data_key, l.manifest_key, l.data_sha256, l.record_count,
       l.hot_window_days, l.archived_at, l.archived_by, l.retention_until, l.legal_hold, l.store_endpoint, l.store_bucket,
       COALESCE((SELECT array_agg(h.id ORDER BY h.id) FROM archive_holds AS h
                 WHERE h.released_at IS NULL
                   AND NOT (h.id = ANY (sqlc.arg(named_holds)::uuid[]))
                   AND (l.archive_id = ANY (h.archive_ids)
                        OR (h.table_name = l.table_name
                            AND (h.from_at IS NULL OR l.last_record_at >= h.from_at)
                            AND (h.to_at IS NULL OR l.first_record_at < h.to_at))
                        OR (cardinality(h.subject_hashes) > 0
                            AND EXISTS (SELECT 1 FROM archive_subjects AS s2
                                        WHERE s2.archive_id = l.archive_id AND s2.subject_hashes && h.subject_hashes)))), '{}')::uuid[] AS blocking_holds
FROM archive_subjects AS s JOIN archive_ledger AS l ON l.archive_id = s.archive_id
WHERE s.subject_hashes @> ARRAY[sqlc.arg(subject_hash)::bytea]
  AND l.table_name = ANY (sqlc.arg(tables)::text[])
  AND l.purged_at IS NULL
ORDER BY l.first_record_at, l.archive_id;

-- ActiveHoldsAmong lists which of the given holds are active.
-- name: ActiveHoldsAmong :many
SELECT id FROM archive_holds WHERE id = ANY (sqlc.arg(ids)::uuid[]) AND released_at IS NULL ORDER BY id;

-- InsertExpungement records an order awaiting its second identity.
-- name: InsertExpungement :exec
INSERT INTO expungements (expunge_id, status, subject_hash, subject_box, order_ref, reason, holds, archives, requested_by)
VALUES (sqlc.arg(expunge_id), 'awaiting_approval', sqlc.arg(subject_hash), sqlc.arg(subject_box), sqlc.arg(order_ref),
        sqlc.arg(reason), sqlc.arg(holds)::uuid[], sqlc.arg(archives)::uuid[], sqlc.arg(requested_by));

-- GetExpungement reads an order, locked until the transaction ends.
-- name: GetExpungement :one
SELECT expunge_id, status, subject_hash, subject_box, salt_box, commitment, order_ref, reason, holds, archives,
       requested_by, requested_at, approved_by, executed_at, rewritten, rows_removed, certificate_key
FROM expungements WHERE expunge_id = sqlc.arg(expunge_id)
FOR UPDATE;

-- StartExpungement records the approver, the sealed salt and the
-- commitment: from here the order executes (and resumes after a crash).
-- name: StartExpungement :execrows
UPDATE expungements
SET status = 'executing', approved_by = sqlc.arg(approved_by), salt_box = sqlc.arg(salt_box), commitment = sqlc.arg(commitment)
WHERE expunge_id = sqlc.arg(expunge_id) AND status = 'awaiting_approval';

-- CompleteExpungement erases the subject's hash, the sealed subject and
-- the sealed salt, and records the outcome.
-- name: CompleteExpungement :execrows
UPDATE expungements
SET status = 'executed', executed_at = now(), subject_hash = NULL, subject_box = NULL, salt_box = NULL,
    rewritten = sqlc.arg(rewritten), rows_removed = sqlc.arg(rows_removed), certificate_key = sqlc.arg(certificate_key)
WHERE expunge_id = sqlc.arg(expunge_id) AND status = 'executing';

-- ExpungementLineage lists the archives an order superseded, with their
-- successors (none when every row was the subject's).
-- name: ExpungementLineage :many
SELECT o.archive_id, o.table_name, o.data_key, o.manifest_key, o.data_sha256, o.record_count,
       o.retention_until,
       n.archive_id AS new_archive_id, n.data_key AS new_data_key, n.manifest_key AS new_manifest_key,
       n.data_sha256 AS new_data_sha256, n.record_count AS new_record_count
FROM archive_ledger AS o LEFT JOIN archive_ledger AS n ON n.archive_id = o.superseded_by
WHERE o.expunge_id = sqlc.arg(expunge_id)
ORDER BY o.first_record_at, o.archive_id;

-- LockLedgerRow locks one unpurged archive's ledger row for its rewrite.
-- name: LockLedgerRow :one
SELECT archive_id, purged_at, legal_hold FROM archive_ledger WHERE archive_id = sqlc.arg(archive_id) FOR UPDATE;

-- SupersedeArchive stamps an archive rewritten by an expungement: purged
-- (its objects are destroyed next), by the approver, with its successor.
-- name: SupersedeArchive :execrows
UPDATE archive_ledger
SET purged_at = now(), purged_by = sqlc.arg(purged_by), expunge_id = sqlc.arg(expunge_id), superseded_by = sqlc.narg(superseded_by)
WHERE archive_id = sqlc.arg(archive_id) AND purged_at IS NULL;

-- MarkSuccessor records what a rewritten archive supersedes and gives it
-- the retention date of retention_of: its predecessor, or, booked again
-- after a restore with the predecessor destroyed since, the archive its
-- line descends from. A line the ledger does not know takes the date its
-- journal entry recorded (days since 1970-01-01, NULL: none), when it
-- recorded one (retention_recorded); else it keeps its own.
-- name: MarkSuccessor :execrows
UPDATE archive_ledger AS n
SET supersedes = sqlc.arg(supersedes),
    retention_until = CASE
        WHEN EXISTS (SELECT 1 FROM archive_ledger AS o WHERE o.archive_id = sqlc.arg(retention_of))
            THEN (SELECT o.retention_until FROM archive_ledger AS o WHERE o.archive_id = sqlc.arg(retention_of))
        WHEN sqlc.arg(retention_recorded)::boolean
            THEN DATE '1970-01-01' + sqlc.narg(retention_days)::int
        ELSE n.retention_until END
WHERE n.archive_id = sqlc.arg(archive_id);

-- AddHoldArchive makes a hold that names an archive by id name its
-- successor too.
-- name: AddHoldArchive :execrows
UPDATE archive_holds
SET archive_ids = archive_ids || sqlc.arg(successor)::uuid
WHERE released_at IS NULL AND sqlc.arg(predecessor)::uuid = ANY (archive_ids) AND NOT (sqlc.arg(successor)::uuid = ANY (archive_ids));

-- ReplaceIndexHash and ReplaceHoldHash replace a subject's keyed hash by
-- the order's commitment in the index and in released holds (a seal stays:
-- the court's seal outlives the rows, so rows written later stay hidden;
-- an active hold stays too: it still holds the subject, so archives
-- booked later with the subject's new rows are held, ADR-067).
-- name: ReplaceIndexHash :execrows
UPDATE archive_subjects
SET subject_hashes = array_replace(subject_hashes, sqlc.arg(old_hash)::bytea, sqlc.arg(new_hash)::bytea)
WHERE subject_hashes @> ARRAY[sqlc.arg(old_hash)::bytea];

-- name: ReplaceHoldHash :execrows
UPDATE archive_holds
SET subject_hashes = array_replace(subject_hashes, sqlc.arg(old_hash)::bytea, sqlc.arg(new_hash)::bytea)
WHERE subject_hashes @> ARRAY[sqlc.arg(old_hash)::bytea] AND released_at IS NOT NULL;


-- ReplaceLogHash rewrites the lifecycle log's mentions of the subject's
-- keyed hash (hex) with the commitment's: the insert-only log is updated
-- only through the expungement's bypass (set_config craig.expunge_id in
-- the same transaction).
-- name: ReplaceLogHash :execrows
UPDATE archive_lifecycle_log
SET detail = replace(detail::text, sqlc.arg(old_hex)::text, sqlc.arg(new_hex)::text)::jsonb
WHERE strpos(detail::text, sqlc.arg(old_hex)::text) > 0;

-- SetExpungeBypass opens the insert-only bypass for this transaction only.
-- name: SetExpungeBypass :exec
SELECT set_config('craig.expunge_id', sqlc.arg(expunge_id)::text, true);

-- AddHotRowsRemoved adds the hot rows one call deleted and returns the
-- order's total so far (a resumed order counts what the crashed call did).
-- name: AddHotRowsRemoved :one
UPDATE expungements SET hot_rows_removed = hot_rows_removed + sqlc.arg(rows)::bigint
WHERE expunge_id = sqlc.arg(expunge_id)
RETURNING hot_rows_removed;

-- ListSeals lists the sealed subjects (by keyed hash).
-- name: ListSeals :many
SELECT subject_hash, order_ref, sealed_by, sealed_at FROM subject_seals ORDER BY sealed_at, subject_hash;

-- ListExpungements lists the orders, newest first.
-- name: ListExpungements :many
SELECT expunge_id, status, order_ref, commitment, archives, requested_by, requested_at, approved_by, executed_at,
       rewritten, rows_removed, certificate_key,
       EXISTS (SELECT 1 FROM subject_seals AS s WHERE s.subject_hash = expungements.subject_hash) AS sealed
FROM expungements ORDER BY requested_at DESC, expunge_id
LIMIT 1000;

-- ReplaceOutboxHash rewrites the service's staged events that name the
-- subject's keyed hash (hex): reads and holds announced before the order.
-- name: ReplaceOutboxHash :execrows
UPDATE event_outbox
SET payload = replace(payload::text, sqlc.arg(old_hex)::text, sqlc.arg(new_hex)::text)::jsonb
WHERE strpos(payload::text, sqlc.arg(old_hex)::text) > 0;

-- SubjectHoldsOf lists the active holds, other than the given ones, whose
-- subjects (keyed hashes) meet the given ones: the order's own, and the
-- other subjects of its hot rows. They block an order about it.
-- name: SubjectHoldsOf :many
SELECT id FROM archive_holds
WHERE released_at IS NULL AND subject_hashes && sqlc.arg(subject_hashes)::bytea[] AND NOT (id = ANY (sqlc.arg(named_holds)::uuid[]))
ORDER BY id;

-- PendingExpungement finds an order about the subject not yet executed.
-- name: PendingExpungement :one
SELECT expunge_id FROM expungements WHERE subject_hash = sqlc.arg(subject_hash) AND status <> 'executed' LIMIT 1;

-- SealedHashesOutside lists the keyed hashes of the subjects sealed under
-- another order than order_ref (compared trimmed and case-folded): a
-- sealed-access read under order_ref still hides their rows.
-- name: SealedHashesOutside :many
SELECT subject_hash FROM subject_seals
WHERE lower(btrim(order_ref)) <> lower(btrim(sqlc.arg(order_ref)::text))
ORDER BY subject_hash;

-- CountSealsUnder counts the seals placed under order_ref (trimmed,
-- case-folded): a sealed-access read names an order that sealed something.
-- name: CountSealsUnder :one
SELECT count(*) FROM subject_seals WHERE lower(btrim(order_ref)) = lower(btrim(sqlc.arg(order_ref)::text));

-- SubjectIsSealed: whether the subject of this keyed hash is sealed.
-- name: SubjectIsSealed :one
SELECT EXISTS (SELECT 1 FROM subject_seals WHERE subject_hash = sqlc.arg(subject_hash)::bytea);
