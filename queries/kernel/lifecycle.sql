-- The archive lifecycle (kernel/lifecycle): records, retention dates, legal
-- holds and purges of a service's OWN archives (its local archive_ledger).
--
-- The purge predicate is written out at every statement that selects
-- for, or stamps, a destruction:
--   retention_until IS NOT NULL AND retention_until <= (now() AT TIME ZONE 'UTC')::date
--   AND NOT legal_hold AND NOT archive_is_held(...) AND purged_at IS NULL

-- ListArchiveRecords pages the ledger (by archive_id) with each archive's
-- state; filters are optional. A sealed subject answers as an unknown one
-- does (ADR-067): a hold that covers an archive only through a sealed
-- subject's hash is not listed in its holds, and the archive is not shown
-- held (nor selected by held) for it; it is held all the same (the purge
-- reads archive_is_held).
-- name: ListArchiveRecords :many
SELECT l.archive_id, l.table_name, l.data_key, l.manifest_key, l.data_sha256, l.record_count,
       l.first_record_id, l.last_record_id, l.first_record_at, l.last_record_at, l.archived_at, l.archived_by,
       l.retention_until, (l.legal_hold AND cardinality(v.holds) > 0)::boolean AS legal_hold, l.purged_at, l.purged_by,
       v.holds
FROM archive_ledger AS l
CROSS JOIN LATERAL (
    SELECT COALESCE((SELECT array_agg(h.id ORDER BY h.id) FROM archive_holds AS h
                     WHERE h.released_at IS NULL
                       AND (l.archive_id = ANY (h.archive_ids)
                            OR (h.table_name = l.table_name
                                AND (h.from_at IS NULL OR l.last_record_at >= h.from_at)
                                AND (h.to_at IS NULL OR l.first_record_at < h.to_at))
                            OR (cardinality(h.subject_hashes) > 0
                                AND (NOT l.subjects_indexed
                                     OR EXISTS (SELECT 1 FROM archive_subjects AS s
                                                WHERE s.archive_id = l.archive_id
                                                  AND s.subject_hashes && ARRAY(SELECT x FROM unnest(h.subject_hashes) AS x
                                                                                EXCEPT SELECT subject_hash FROM subject_seals)))))), '{}')::uuid[] AS holds
) AS v
WHERE (sqlc.narg(table_name)::text IS NULL OR l.table_name = sqlc.narg(table_name)::text)
  AND (sqlc.narg(held)::boolean IS NULL OR (l.legal_hold AND cardinality(v.holds) > 0) = sqlc.narg(held)::boolean)
  AND (sqlc.narg(purgeable)::boolean IS NULL OR sqlc.narg(purgeable)::boolean = (
           l.retention_until IS NOT NULL AND l.retention_until <= (now() AT TIME ZONE 'UTC')::date AND NOT l.legal_hold
           AND NOT archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at)
           AND l.purged_at IS NULL))
  AND l.archive_id > sqlc.arg(after)::uuid
ORDER BY l.archive_id
LIMIT sqlc.arg(row_limit)::int;

-- SetRetentionUntil sets or moves an unpurged archive's retention date.
-- name: SetRetentionUntil :one
UPDATE archive_ledger AS l
SET retention_until = sqlc.arg(retention_until)::date
WHERE l.archive_id = sqlc.arg(archive_id) AND l.purged_at IS NULL
RETURNING l.archive_id, l.table_name, l.retention_until, (SELECT r.retention_until FROM archive_ledger AS r WHERE r.archive_id = l.archive_id) AS previous;

-- GetLedgerRow reads one archive's lifecycle state.
-- name: GetLedgerRow :one
SELECT archive_id, table_name, retention_until, legal_hold, purged_at
FROM archive_ledger WHERE archive_id = sqlc.arg(archive_id);

-- InsertHold records a legal hold.
-- name: InsertHold :one
INSERT INTO archive_holds (title, reason, table_name, from_at, to_at, archive_ids, subject_hashes, created_by)
VALUES (sqlc.arg(title), sqlc.arg(reason), sqlc.narg(table_name), sqlc.narg(from_at), sqlc.narg(to_at),
        sqlc.arg(archive_ids)::uuid[], sqlc.arg(subject_hashes)::bytea[], sqlc.arg(created_by))
RETURNING id, created_at;

-- ReleaseHold releases an active hold (its reason required).
-- name: ReleaseHold :one
UPDATE archive_holds
SET released_at = now(), released_by = sqlc.arg(released_by), release_reason = sqlc.arg(release_reason)
WHERE id = sqlc.arg(id) AND released_at IS NULL
RETURNING id, released_at;

-- ListHolds lists every hold (or the one hold_id names), newest first, with
-- the archives it covers now, each kind of cover found by its own index (a
-- hold reads no ledger row it does not cover, ADR-076). A sealed subject
-- answers as an unknown one does (ADR-067): the archives the index says
-- hold it are not listed by its hash (the hold still holds them:
-- archive_is_held reads every hash).
-- name: ListHolds :many
SELECT h.id, h.title, h.reason, h.table_name, h.from_at, h.to_at, h.archive_ids, h.created_by, h.created_at,
       h.released_at, h.released_by, h.release_reason, h.subject_hashes,
       COALESCE((SELECT array_agg(c.archive_id ORDER BY c.archive_id) FROM (
                     SELECT l.archive_id FROM archive_ledger AS l WHERE l.archive_id = ANY (h.archive_ids)
                     UNION
                     SELECT l.archive_id FROM archive_ledger AS l
                     WHERE h.table_name IS NOT NULL AND h.table_name = l.table_name
                       AND (h.from_at IS NULL OR l.last_record_at >= h.from_at)
                       AND (h.to_at IS NULL OR l.first_record_at < h.to_at)
                     UNION
                     SELECT l.archive_id FROM archive_ledger AS l
                     WHERE cardinality(h.subject_hashes) > 0 AND NOT l.subjects_indexed
                     UNION
                     SELECT s.archive_id FROM archive_subjects AS s
                     WHERE cardinality(h.subject_hashes) > 0
                       AND s.subject_hashes && ARRAY(SELECT x FROM unnest(h.subject_hashes) AS x
                                                     EXCEPT SELECT subject_hash FROM subject_seals)) AS c), '{}')::uuid[] AS covers
FROM archive_holds AS h
WHERE sqlc.narg(hold_id)::uuid IS NULL OR h.id = sqlc.narg(hold_id)::uuid
ORDER BY h.created_at DESC, h.id DESC;

-- RefreshLegalHolds makes legal_hold true exactly for the archives an
-- active hold covers (after a hold is placed or released) and returns the
-- archives whose state changed. "Covers" is archive_is_held's predicate,
-- one branch per kind of hold so that each is an index lookup (ADR-076):
-- the archives named, a table's (by time range), a subject's (the index's
-- GIN lookup) and every archive not yet indexed while a subject hold is
-- active; the rows to clear are read through archive_ledger_held_idx. A
-- row is set to its state, never toggled, and only while it differs: a
-- refresh that waited for another's update of the row re-checks it against
-- the row that update left, and leaves it when it already agrees.
-- name: RefreshLegalHolds :many
WITH active AS (
    SELECT archive_ids, table_name, from_at, to_at, subject_hashes FROM archive_holds WHERE released_at IS NULL
), held AS (
    SELECT x.archive_id FROM active AS h, unnest(h.archive_ids) AS x (archive_id) WHERE x.archive_id IS NOT NULL
    UNION
    SELECT l.archive_id FROM active AS h JOIN archive_ledger AS l
        ON h.table_name IS NOT NULL AND h.table_name = l.table_name
       AND (h.from_at IS NULL OR l.last_record_at >= h.from_at)
       AND (h.to_at IS NULL OR l.first_record_at < h.to_at)
    UNION
    SELECT s.archive_id FROM active AS h JOIN archive_subjects AS s
        ON cardinality(h.subject_hashes) > 0 AND s.subject_hashes && h.subject_hashes
    UNION
    SELECT l.archive_id FROM archive_ledger AS l
    WHERE NOT l.subjects_indexed AND EXISTS (SELECT 1 FROM active AS h WHERE cardinality(h.subject_hashes) > 0)
), flip AS (
    SELECT l.archive_id FROM archive_ledger AS l
    WHERE l.archive_id = ANY (ARRAY(SELECT h.archive_id FROM held AS h)) AND NOT l.legal_hold
    UNION ALL
    SELECT l.archive_id FROM archive_ledger AS l
    WHERE l.legal_hold AND NOT EXISTS (SELECT 1 FROM held AS h WHERE h.archive_id = l.archive_id)
)
UPDATE archive_ledger AS l
SET legal_hold = (l.archive_id IN (SELECT h.archive_id FROM held AS h))
WHERE l.archive_id = ANY (ARRAY(SELECT f.archive_id FROM flip AS f))
  AND l.legal_hold IS DISTINCT FROM (l.archive_id IN (SELECT h.archive_id FROM held AS h))
RETURNING l.archive_id, l.legal_hold, l.data_key, l.manifest_key, (l.purged_at IS NOT NULL)::boolean AS purged;

-- SelectPurgeCandidates lists (limit + 1 to tell "more") the archives the
-- purge may destroy now, oldest first.
-- name: SelectPurgeCandidates :many
SELECT l.archive_id
FROM archive_ledger AS l
WHERE l.retention_until IS NOT NULL AND l.retention_until <= (now() AT TIME ZONE 'UTC')::date
  AND NOT l.legal_hold
  AND NOT archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at)
  AND l.purged_at IS NULL
ORDER BY l.retention_until, l.archived_at, l.archive_id
LIMIT sqlc.arg(row_limit)::int;

-- LockPurgeable re-checks one archive immediately before its object
-- deletes and locks its row until the stamp commits: no row, no delete.
-- name: LockPurgeable :one
SELECT l.archive_id, l.table_name, l.data_key, l.manifest_key, l.data_sha256, l.record_count,
       l.first_record_at, l.last_record_at
FROM archive_ledger AS l
WHERE l.archive_id = sqlc.arg(archive_id)
  AND l.retention_until IS NOT NULL AND l.retention_until <= (now() AT TIME ZONE 'UTC')::date
  AND NOT l.legal_hold
  AND NOT archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at)
  AND l.purged_at IS NULL
FOR UPDATE;

-- StampPurged records the destruction, with the predicate once more.
-- name: StampPurged :execrows
UPDATE archive_ledger AS l
SET purged_at = now(), purged_by = sqlc.arg(purged_by), purge_id = sqlc.arg(purge_id)
WHERE l.archive_id = sqlc.arg(archive_id)
  AND l.retention_until IS NOT NULL AND l.retention_until <= (now() AT TIME ZONE 'UTC')::date
  AND NOT l.legal_hold
  AND NOT archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at)
  AND l.purged_at IS NULL;

-- InsertPurge records a purge's destruction list.
-- name: InsertPurge :exec
INSERT INTO purges (purge_id, status, candidates, requested_by)
VALUES (sqlc.arg(purge_id), sqlc.arg(status), sqlc.arg(candidates)::uuid[], sqlc.arg(requested_by));

-- GetPurge reads a purge, locking it while it is executed.
-- name: GetPurge :one
SELECT purge_id, status, candidates, requested_by, approved_by
FROM purges WHERE purge_id = sqlc.arg(purge_id)
FOR UPDATE;

-- CompletePurge records an executed purge.
-- name: CompletePurge :exec
UPDATE purges
SET status = 'executed', approved_by = sqlc.narg(approved_by), executed_at = now(),
    purged = sqlc.arg(purged)::uuid[], skipped = sqlc.arg(skipped)::uuid[], certificate_key = sqlc.arg(certificate_key)
WHERE purge_id = sqlc.arg(purge_id);

-- LogLifecycle records one lifecycle act.
-- name: LogLifecycle :exec
INSERT INTO archive_lifecycle_log (actor, action, archive_id, hold_id, purge_id, detail)
VALUES (sqlc.arg(actor), sqlc.arg(action), sqlc.narg(archive_id), sqlc.narg(hold_id), sqlc.narg(purge_id), sqlc.arg(detail));

-- ScheduleRetention dates a new archive by its table's retention schedule
-- (archive.retention.<table>_days): the UTC day of its newest record plus
-- days. It never moves a date already set.
-- name: ScheduleRetention :exec
UPDATE archive_ledger
SET retention_until = (last_record_at AT TIME ZONE 'UTC')::date + sqlc.arg(days)::int
WHERE archive_id = sqlc.arg(archive_id) AND retention_until IS NULL
  -- Once a records schedule is in force, archives are dated by it
  -- (ADR-073), never by archive.retention.<table>_days.
  AND NOT EXISTS (SELECT 1 FROM retention_schedules WHERE approved_at IS NOT NULL);

-- UnknownArchiveIDs returns those of the given ids the ledger does not hold.
-- name: UnknownArchiveIDs :many
SELECT u.id::uuid AS archive_id
FROM unnest(sqlc.arg(ids)::uuid[]) AS u(id)
WHERE NOT EXISTS (SELECT 1 FROM archive_ledger AS l WHERE l.archive_id = u.id);

-- ArchiveCandidates lists the archives of a table whose id range may hold
-- record id (ranges are MIN/MAX and overlap at batch boundaries), oldest
-- first, with their purge state. An archive an expungement rewrote is not
-- one: its successor holds its other rows, and the expunged ones are gone
-- as if they never were (not "purged").
-- name: ArchiveCandidates :many
SELECT archive_id, data_key, data_sha256, purged_at
FROM archive_ledger
WHERE table_name = sqlc.arg(table_name) AND first_record_id <= sqlc.arg(record_id) AND sqlc.arg(record_id) <= last_record_id
  AND expunge_id IS NULL
ORDER BY archived_at, archive_id;

-- LedgerToVerify pages the unpurged ledger rows (by archive_id) with every
-- fact a manifest repeats.
-- name: LedgerToVerify :many
SELECT archive_id, table_name, data_key, manifest_key, data_sha256, record_count, store_endpoint, store_bucket,
       first_record_id, last_record_id, first_record_at, last_record_at, hot_window_days, archived_at, archived_by, legal_hold
FROM archive_ledger
WHERE purged_at IS NULL AND archive_id > sqlc.arg(after)::uuid
ORDER BY archive_id
LIMIT sqlc.arg(row_limit)::int;

-- UnnamedKeys are the keys among those given that no ledger row names
-- (purged archives' keys included: their keys are no orphans to collect,
-- they are gone), each an index lookup: a verify walks the store a page at
-- a time, whatever the ledger's size (ADR-076).
-- name: UnnamedKeys :many
SELECT k::text AS object_key
FROM unnest(sqlc.arg(keys)::text[]) AS k
WHERE NOT EXISTS (SELECT 1 FROM archive_ledger AS l WHERE l.data_key = k)
  AND NOT EXISTS (SELECT 1 FROM archive_ledger AS l WHERE l.manifest_key = k);

-- ArchivesInRange lists the unpurged archives of a table whose record
-- times overlap [from, to), in record-time order.
-- name: ArchivesInRange :many
SELECT archive_id, data_key, data_sha256
FROM archive_ledger
WHERE table_name = sqlc.arg(table_name) AND purged_at IS NULL
  AND first_record_at < sqlc.arg(to_at) AND last_record_at >= sqlc.arg(from_at)
ORDER BY first_record_at, archive_id;

-- HeldArchives pages the unpurged archives under a legal hold (by
-- archive_id), for the store-lock reconciliation.
-- name: HeldArchives :many
SELECT archive_id, data_key, manifest_key
FROM archive_ledger
WHERE legal_hold AND purged_at IS NULL AND archive_id > sqlc.arg(after)::uuid
ORDER BY archive_id
LIMIT sqlc.arg(row_limit)::int;

-- PurgeableAmong returns those of the given archives the purge may destroy
-- now (the purge predicate, as SelectPurgeCandidates).
-- name: PurgeableAmong :many
SELECT l.archive_id
FROM archive_ledger AS l
WHERE l.archive_id = ANY (sqlc.arg(ids)::uuid[])
  AND l.retention_until IS NOT NULL AND l.retention_until <= (now() AT TIME ZONE 'UTC')::date
  AND NOT l.legal_hold
  AND NOT archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at)
  AND l.purged_at IS NULL
ORDER BY l.retention_until, l.archived_at, l.archive_id;

-- PurgedArchivesInRange lists the purged archives of a table whose record
-- times overlapped [from, to): what a range read can no longer return
-- (an archive an expungement rewrote is not: its successor is read).
-- name: PurgedArchivesInRange :many
SELECT archive_id, first_record_at, last_record_at, record_count, purged_at
FROM archive_ledger
WHERE table_name = sqlc.arg(table_name) AND purged_at IS NOT NULL AND expunge_id IS NULL
  AND first_record_at < sqlc.arg(to_at) AND last_record_at >= sqlc.arg(from_at)
ORDER BY first_record_at, archive_id;

-- GetLedgerRowForUpdate reads one archive's lifecycle state and locks its
-- row until the transaction ends (a date is judged against the date it
-- replaces, not one a concurrent call is replacing).
-- name: GetLedgerRowForUpdate :one
SELECT archive_id, table_name, retention_until, legal_hold, purged_at
FROM archive_ledger WHERE archive_id = sqlc.arg(archive_id)
FOR UPDATE;

-- LockHoldsExclusive orders a hold's placement with archive bookings (see
-- lease.HoldsKey): held until the placement's transaction ends.
-- name: LockHoldsExclusive :exec
SELECT pg_advisory_xact_lock(sqlc.arg(key)::bigint);

-- LedgerStates counts each table's archives by lifecycle state for the
-- dashboard (archive_ledger_archives): kept (not purged), held (an active
-- hold covers it), due (dated, past its date, unheld: the next purge's
-- candidates), undated (never purgeable until dated) and purged. Dates
-- compare as UTC dates, as the purge does.
-- name: LedgerStates :many
SELECT l.table_name,
       count(*) FILTER (WHERE l.purged_at IS NULL)::bigint AS kept,
       count(*) FILTER (WHERE l.purged_at IS NULL
           AND (l.legal_hold OR archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at)))::bigint AS held,
       count(*) FILTER (WHERE l.purged_at IS NULL
           AND l.retention_until IS NOT NULL AND l.retention_until <= (now() AT TIME ZONE 'UTC')::date
           AND NOT l.legal_hold
           AND NOT archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at))::bigint AS due,
       count(*) FILTER (WHERE l.purged_at IS NULL AND l.retention_until IS NULL)::bigint AS undated,
       count(*) FILTER (WHERE l.purged_at IS NOT NULL)::bigint AS purged
FROM archive_ledger AS l
GROUP BY l.table_name
ORDER BY l.table_name;

-- SubjectArchives lists the archives of the given tables that may hold a
-- subject: those the index says hold its keyed hash, and those not yet
-- indexed (which might), in record-time order, with their purge state.
-- name: SubjectArchives :many
SELECT a.archive_id, a.table_name, a.data_key, a.data_sha256, a.record_count, a.purged_at, a.subjects_indexed
FROM (
    SELECT l.archive_id, l.table_name, l.data_key, l.data_sha256, l.record_count, l.purged_at, l.subjects_indexed, l.first_record_at
    FROM archive_subjects AS s JOIN archive_ledger AS l ON l.archive_id = s.archive_id
    WHERE s.subject_hashes @> ARRAY[sqlc.arg(subject_hash)::bytea] AND l.table_name = ANY (sqlc.arg(tables)::text[])
      AND l.expunge_id IS NULL
    UNION
    SELECT l.archive_id, l.table_name, l.data_key, l.data_sha256, l.record_count, l.purged_at, l.subjects_indexed, l.first_record_at
    FROM archive_ledger AS l
    WHERE NOT l.subjects_indexed AND l.table_name = ANY (sqlc.arg(tables)::text[])
) AS a
ORDER BY a.first_record_at, a.archive_id;

-- UnindexedArchives pages (by archive_id) the archives whose subjects are
-- not in the index yet: the backfill's work list.
-- name: UnindexedArchives :many
SELECT archive_id, table_name, data_key, data_sha256, purged_at
FROM archive_ledger
WHERE NOT subjects_indexed AND archive_id > sqlc.arg(after)::uuid
ORDER BY archive_id
LIMIT sqlc.arg(row_limit)::int;

-- CountUnindexed counts the unpurged archives of the given tables not yet
-- indexed: a subject hold is refused while there are any (it would hold
-- them all).
-- name: CountUnindexed :one
SELECT count(*)::bigint
FROM archive_ledger
WHERE NOT subjects_indexed AND purged_at IS NULL AND table_name = ANY (sqlc.arg(tables)::text[]);

-- SubjectHolds says, for the archives named or indexed under one of the
-- given keyed hashes, whether an active subject hold covers each (the
-- fleet ledger's subject_hold). The archives are found by their ids and
-- the index's GIN lookup first, then read by key (ADR-076): an OR of the
-- two read the whole ledger.
-- name: SubjectHolds :many
SELECT l.archive_id,
       EXISTS (SELECT 1 FROM archive_holds AS h
               WHERE h.released_at IS NULL AND cardinality(h.subject_hashes) > 0
                 AND (NOT l.subjects_indexed
                      OR EXISTS (SELECT 1 FROM archive_subjects AS s
                                 WHERE s.archive_id = l.archive_id AND s.subject_hashes && h.subject_hashes)))::boolean AS subject_held
FROM archive_ledger AS l
WHERE l.purged_at IS NULL
  AND l.archive_id = ANY (ARRAY(SELECT x FROM unnest(sqlc.arg(ids)::uuid[]) AS x
                                UNION
                                SELECT s.archive_id FROM archive_subjects AS s WHERE s.subject_hashes && sqlc.arg(hashes)::bytea[]))
ORDER BY l.archive_id;

-- HoldSubjects reads a hold's keyed subject hashes.
-- name: HoldSubjects :one
SELECT subject_hashes FROM archive_holds WHERE id = sqlc.arg(id);

-- PurgeView reads a purge and its candidates' ledger facts (what the
-- approver approves), without locking it.
-- name: PurgeView :one
SELECT purge_id, status, candidates, requested_by, requested_at, approved_by, executed_at
FROM purges WHERE purge_id = sqlc.arg(purge_id);

-- PurgeCandidates are the ledger facts of a purge's candidates, in the
-- frozen list's order; held and due are as of now.
-- name: PurgeCandidates :many
SELECT l.archive_id, l.table_name, l.record_count, l.first_record_at, l.last_record_at,
       l.retention_until, l.legal_hold, l.purged_at,
       (l.retention_until IS NOT NULL AND l.retention_until <= (now() AT TIME ZONE 'UTC')::date
        AND NOT l.legal_hold AND l.purged_at IS NULL
        AND NOT archive_is_held(l.archive_id, l.table_name, l.first_record_at, l.last_record_at))::boolean AS due
FROM unnest(sqlc.arg(ids)::uuid[]) WITH ORDINALITY AS c(id, ord)
JOIN archive_ledger AS l ON l.archive_id = c.id
ORDER BY c.ord;
