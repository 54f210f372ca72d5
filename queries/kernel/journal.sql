-- The journal of acts (migrations/archive/00006, ADR-070).

-- LockJournal serializes appends (a transaction-scoped lock): sequence
-- numbers are dense and in commit order.
-- name: LockJournal :exec
SELECT pg_advisory_xact_lock(sqlc.arg(key)::bigint);

-- AppendJournal adds the next entry.
-- name: AppendJournal :one
INSERT INTO retention_journal (seq, act, detail, actor, at)
SELECT COALESCE(max(seq), 0) + 1, sqlc.arg(act)::text, sqlc.arg(detail)::jsonb, sqlc.arg(actor)::text, now()
FROM retention_journal
RETURNING seq, at;

-- AdoptJournal records a store entry the database lacked, as it is.
-- name: AdoptJournal :execrows
INSERT INTO retention_journal (seq, act, detail, actor, at, stored_at)
VALUES (sqlc.arg(seq), sqlc.arg(act), sqlc.arg(detail)::jsonb, sqlc.arg(actor), sqlc.arg(at), now())
ON CONFLICT (seq) DO NOTHING;

-- UnstoredJournal lists the entries not yet written to the store.
-- name: UnstoredJournal :many
SELECT seq, act, detail, actor, at FROM retention_journal WHERE stored_at IS NULL ORDER BY seq;

-- MarkJournalStored records that an entry's store object was written.
-- name: MarkJournalStored :exec
UPDATE retention_journal SET stored_at = now() WHERE seq = sqlc.arg(seq) AND stored_at IS NULL;

-- JournalSeqs lists the database's sequence numbers after a point.
-- name: JournalSeqs :many
SELECT seq FROM retention_journal WHERE seq > sqlc.arg(after) ORDER BY seq;

-- JournalMax is the database's highest sequence number (0: none).
-- name: JournalMax :one
SELECT COALESCE(max(seq), 0)::bigint FROM retention_journal;

-- ReapplyHold places a journaled hold again under its own id (a restore
-- forgot it); one already there is left as it is.
-- name: ReapplyHold :execrows
INSERT INTO archive_holds (id, title, reason, table_name, from_at, to_at, archive_ids, subject_hashes, created_by, created_at)
VALUES (sqlc.arg(id), sqlc.arg(title), sqlc.arg(reason), sqlc.narg(table_name), sqlc.narg(from_at), sqlc.narg(to_at),
        sqlc.arg(archive_ids)::uuid[], sqlc.arg(subject_hashes)::bytea[], sqlc.arg(created_by), sqlc.arg(created_at))
ON CONFLICT (id) DO NOTHING;

-- ReapplyRelease releases a journaled hold again.
-- name: ReapplyRelease :execrows
UPDATE archive_holds
SET released_at = sqlc.arg(released_at), released_by = sqlc.arg(released_by), release_reason = sqlc.arg(release_reason)
WHERE id = sqlc.arg(id) AND released_at IS NULL;

-- ReapplyPurged stamps a journaled purge's archive purged again: its
-- objects are destroyed (the store's journal says so), whatever the
-- restored ledger says of its date or holds.
-- name: ReapplyPurged :execrows
UPDATE archive_ledger
SET purged_at = sqlc.arg(purged_at), purged_by = sqlc.arg(purged_by), purge_id = sqlc.narg(purge_id)
WHERE archive_id = sqlc.arg(archive_id) AND purged_at IS NULL;

-- ReapplySuperseded stamps an archive an expungement rewrote purged and
-- superseded again.
-- name: ReapplySuperseded :execrows
UPDATE archive_ledger
SET purged_at = sqlc.arg(purged_at), purged_by = sqlc.arg(purged_by), expunge_id = sqlc.arg(expunge_id), superseded_by = sqlc.narg(superseded_by)
WHERE archive_id = sqlc.arg(archive_id) AND purged_at IS NULL;

-- LedgerHas says whether the ledger has an archive.
-- name: LedgerHas :one
SELECT EXISTS (SELECT 1 FROM archive_ledger WHERE archive_id = sqlc.arg(archive_id));

-- ReapplyExpungement records a journaled expungement as executed: the
-- restored row (awaiting approval, executing) is completed, and one the
-- restore forgot is recorded anew; its subject, hash and salt are gone.
-- name: ReapplyExpungement :exec
INSERT INTO expungements (expunge_id, status, commitment, order_ref, reason, archives, requested_by, approved_by, executed_at)
VALUES (sqlc.arg(expunge_id), 'executed', sqlc.arg(commitment), sqlc.arg(order_ref), sqlc.arg(reason), sqlc.arg(archives)::uuid[],
        sqlc.arg(requested_by), sqlc.arg(approved_by), sqlc.arg(executed_at))
ON CONFLICT (expunge_id) DO UPDATE
SET status = 'executed', subject_hash = NULL, subject_box = NULL, salt_box = NULL, commitment = EXCLUDED.commitment,
    approved_by = EXCLUDED.approved_by, executed_at = COALESCE(expungements.executed_at, EXCLUDED.executed_at)
WHERE expungements.status <> 'executed';

-- ReapplyPurgeRow records a journaled purge's destroyed archive on its
-- purges row, when the restored database has it: the purge was executed
-- (the store's journal says so), by its approver when another identity.
-- name: ReapplyPurgeRow :execrows
UPDATE purges
SET status = 'executed',
    approved_by = CASE WHEN requested_by <> sqlc.arg(actor)::text THEN sqlc.arg(actor)::text ELSE approved_by END,
    executed_at = COALESCE(executed_at, sqlc.arg(executed_at)),
    purged = CASE WHEN sqlc.arg(archive_id)::uuid = ANY (purged) THEN purged ELSE purged || sqlc.arg(archive_id)::uuid END,
    certificate_key = COALESCE(certificate_key, sqlc.arg(certificate_key)::text)
WHERE purge_id = sqlc.arg(purge_id);

-- JournalDetails are the database's entries of one act, in order: what
-- reconcile reads of the acts already re-applied (an expungement's
-- lineage), besides the store's entries the database lacks.
-- name: JournalDetails :many
SELECT seq, detail FROM retention_journal WHERE act = sqlc.arg(act)::text ORDER BY seq;
