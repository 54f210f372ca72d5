-- Case rows and due dates (migrations/archive/00011, ADR-073).

-- CaseRowsToIndex are unpurged archives whose case rows are not indexed.
-- name: CaseRowsToIndex :many
SELECT archive_id, table_name, data_key, data_sha256
FROM archive_ledger
WHERE NOT case_rows_indexed AND purged_at IS NULL
ORDER BY archive_id
LIMIT sqlc.arg(row_limit);

-- CountCaseRowsToIndex counts them.
-- name: CountCaseRowsToIndex :one
SELECT count(*) FROM archive_ledger WHERE NOT case_rows_indexed AND purged_at IS NULL;

-- InsertArchiveCaseRows writes an archive's case rows (an empty hash and a
-- NULL box: rows about no case).
-- name: InsertArchiveCaseRows :exec
INSERT INTO archive_cases (archive_id, subject_hash, others, subject_box, oldest_day, newest_day, rows)
SELECT sqlc.arg(archive_id), f.hash, f.others, f.box, f.oldest, f.newest, f.n
FROM (SELECT unnest(sqlc.arg(hashes)::bytea[]) AS hash, unnest(sqlc.arg(others)::bytea[]) AS others, unnest(sqlc.arg(boxes)::bytea[]) AS box,
             unnest(sqlc.arg(oldest)::date[]) AS oldest, unnest(sqlc.arg(newest)::date[]) AS newest, unnest(sqlc.arg(counts)::bigint[]) AS n) AS f;

-- MarkCaseRowsIndexed marks an unpurged archive indexed; no row: it was
-- purged meanwhile (its rows are written for nothing and forgotten).
-- name: MarkCaseRowsIndexed :execrows
UPDATE archive_ledger SET case_rows_indexed = true
WHERE archive_id = sqlc.arg(archive_id) AND purged_at IS NULL AND NOT case_rows_indexed;

-- ForgetPurgedCaseRows deletes the case rows of purged archives: what is
-- destroyed leaves no case, even sealed, behind.
-- name: ForgetPurgedCaseRows :execrows
DELETE FROM archive_cases AS c USING archive_ledger AS l
WHERE l.archive_id = c.archive_id AND l.purged_at IS NOT NULL;

-- ForgetSubjectCaseRows deletes every case row of a subject (an
-- expungement: its hash is replaced everywhere).
-- name: ForgetSubjectCaseRows :execrows
DELETE FROM archive_cases
WHERE subject_hash = sqlc.arg(subject_hash) OR sqlc.arg(subject_hash)::bytea = ANY (retention_hashes(others));

-- DueCases computes, for every group of rows of the schedule's series (a
-- case's rows with the same other subjects; the hot facts passed in, the
-- archived ones from archive_cases), its item and due date, and returns
-- those due on or before as_of with the active holds that keep them.
-- A case follows the clock of the case it merged into (16 hops at most: a
-- longer or circular chain is never due), and the cases merged into one
-- fall due together, from the newest record of any of them; a reopened
-- case is never due; a case.closed clock needs a closure; with several
-- clocks the later one counts; an extension keeps a case until its day.
-- Rows about two cases are due when both cases are. Rows about no case
-- are grouped per day, each day due on its own date under its series'
-- item without a classification. Nothing is listed that an archive not
-- yet indexed by case may hold rows of (never early).
-- name: DueCases :many
WITH RECURSIVE items AS (
    SELECT unnest(sqlc.arg(item_ids)::text[]) AS item_id, unnest(sqlc.arg(item_series)::text[]) AS series,
           NULLIF(unnest(sqlc.arg(item_classes)::text[]), '') AS class, unnest(sqlc.arg(item_record)::boolean[]) AS rec,
           unnest(sqlc.arg(item_closed)::boolean[]) AS closed, unnest(sqlc.arg(item_months)::integer[]) AS months,
           unnest(sqlc.arg(item_days)::integer[]) AS days, unnest(sqlc.arg(item_permanent)::boolean[]) AS perm
), facts AS (
    SELECT f.series, f.hash, f.others, NULL::uuid AS archive_id, NULL::bytea AS box, f.oldest, f.newest, f.n
    FROM (SELECT unnest(sqlc.arg(hot_series)::text[]) AS series, unnest(sqlc.arg(hot_hashes)::bytea[]) AS hash,
                 unnest(sqlc.arg(hot_others)::bytea[]) AS others,
                 unnest(sqlc.arg(hot_oldest)::date[]) AS oldest, unnest(sqlc.arg(hot_newest)::date[]) AS newest,
                 unnest(sqlc.arg(hot_counts)::bigint[]) AS n) AS f
    UNION ALL
    SELECT l.table_name, c.subject_hash, c.others, c.archive_id, c.subject_box, c.oldest_day, c.newest_day, c.rows
    FROM archive_cases AS c JOIN archive_ledger AS l ON l.archive_id = c.archive_id
    WHERE l.purged_at IS NULL AND l.table_name = ANY (sqlc.arg(item_series)::text[])
), chain (hash, at, depth) AS (
    SELECT k.subject_hash, k.subject_hash, 0 FROM case_clocks AS k
    UNION ALL
    SELECT ch.hash, k.merged_into, ch.depth + 1
    FROM chain AS ch JOIN case_clocks AS k ON k.subject_hash = ch.at AND k.state = 'merged'
    WHERE ch.depth < 16
), governing AS (
    SELECT DISTINCT ON (ch.hash) ch.hash, ch.at AS root, k.state, k.closed_at, k.classification
    FROM chain AS ch LEFT JOIN case_clocks AS k ON k.subject_hash = ch.at
    ORDER BY ch.hash, ch.depth DESC
), unindexed AS (
    -- The archives not yet indexed by case, with the subjects the subject
    -- index says they hold (NULL: not indexed by subject either).
    SELECT l.table_name AS series, l.first_record_at, l.last_record_at, CASE WHEN l.subjects_indexed THEN coalesce(s.subject_hashes, '{}') END AS hashes
    FROM archive_ledger AS l LEFT JOIN archive_subjects AS s ON s.archive_id = l.archive_id
    WHERE NOT l.case_rows_indexed AND l.purged_at IS NULL AND l.table_name = ANY (sqlc.arg(item_series)::text[])
), unindexed_roots AS (
    SELECT DISTINCT u.series, coalesce(gv.root, h.hash) AS root
    FROM unindexed AS u CROSS JOIN LATERAL unnest(u.hashes) AS h(hash) LEFT JOIN governing AS gv ON gv.hash = h.hash
), groups AS (
    SELECT row_number() OVER () AS gid, f.series, f.hash, f.others,
           CASE WHEN octet_length(f.hash) = 0 THEN f.newest END AS day,
           min(f.oldest) AS oldest, max(f.newest) AS newest,
           coalesce(sum(f.n) FILTER (WHERE f.archive_id IS NULL), 0)::bigint AS hot_rows,
           coalesce(sum(f.n) FILTER (WHERE f.archive_id IS NOT NULL), 0)::bigint AS archived_rows,
           coalesce(array_agg(DISTINCT f.archive_id) FILTER (WHERE f.archive_id IS NOT NULL), '{}')::uuid[] AS archives,
           (array_agg(f.box) FILTER (WHERE f.box IS NOT NULL))[1] AS box
    FROM facts AS f
    GROUP BY f.series, f.hash, f.others, CASE WHEN octet_length(f.hash) = 0 THEN f.newest END
), rooted AS (
    SELECT g.*, gv.state, gv.closed_at, gv.classification,
           CASE WHEN octet_length(g.hash) > 0 THEN coalesce(gv.root, g.hash) END AS root,
           CASE WHEN octet_length(g.hash) > 0
                THEN max(g.newest) OVER (PARTITION BY g.series, CASE WHEN octet_length(g.hash) > 0 THEN coalesce(gv.root, g.hash) END)
           END AS root_newest
    FROM groups AS g LEFT JOIN governing AS gv ON gv.hash = g.hash
), based AS (
    SELECT r.*, it.item_id,
           CASE
               WHEN it.item_id IS NULL OR it.perm THEN NULL
               WHEN octet_length(r.hash) = 0 THEN retention_add_period(r.day, it.months, it.days)
               WHEN r.state IS DISTINCT FROM 'closed' AND (it.closed OR r.state IS NOT NULL) THEN NULL
               ELSE retention_add_period(GREATEST(CASE WHEN it.rec THEN r.root_newest END,
                                                  CASE WHEN it.closed THEN (r.closed_at AT TIME ZONE 'UTC')::date END),
                                         it.months, it.days)
           END::date AS base_due
    FROM rooted AS r
    LEFT JOIN LATERAL (
        SELECT i.* FROM items AS i
        WHERE i.series = r.series
          AND (i.class IS NULL OR (octet_length(r.hash) > 0 AND r.state = 'closed' AND lower(i.class) = lower(btrim(r.classification))))
        ORDER BY i.class IS NULL
        LIMIT 1
    ) AS it ON true
), extended AS (
    -- An extension (a rejected batch's extend_until) keeps the rows until
    -- its day: they fall due the day after, at the earliest.
    SELECT b.*, CASE WHEN b.base_due IS NULL THEN NULL ELSE GREATEST(b.base_due, ext.until + 1) END::date AS own_due
    FROM based AS b
    LEFT JOIN LATERAL (
        -- A case's extension keeps every case merged with it (they fall
        -- due together): extensions are matched by governing root.
        SELECT max(e.until) AS until FROM disposition_extensions AS e
        WHERE e.series = b.series
          AND CASE WHEN octet_length(b.hash) = 0
                   THEN e.subject_hash = b.hash AND e.day IS NOT DISTINCT FROM b.day
                   ELSE coalesce((SELECT gv.root FROM governing AS gv WHERE gv.hash = e.subject_hash), e.subject_hash) = b.root
              END
    ) AS ext ON true
), case_due AS (
    -- A case's own due date (the same for each of its groups), and
    -- whether its date may be early (an unindexed archive holds it).
    SELECT DISTINCT ON (e.series, e.hash) e.series, e.hash, e.own_due, e.root
    FROM extended AS e WHERE octet_length(e.hash) > 0
    ORDER BY e.series, e.hash, e.own_due DESC NULLS FIRST
), co AS (
    -- Rows about other cases too are due when those cases are: a case
    -- whose date is unknown keeps them.
    SELECT e.gid, bool_or(o.own_due IS NULL) AS any_unknown, max(o.own_due) AS co_due
    FROM extended AS e
    CROSS JOIN LATERAL unnest(retention_hashes(e.others)) AS x(hash)
    JOIN case_due AS o ON o.series = e.series AND o.hash = x.hash
    WHERE octet_length(e.others) > 0
    GROUP BY e.gid
), unsure AS (
    -- The groups an unindexed archive may hold newer rows of: of a case
    -- (or of another case of their rows) merged with one it holds.
    SELECT e.gid FROM extended AS e JOIN unindexed_roots AS ur ON ur.series = e.series AND ur.root = e.root
    UNION
    SELECT e.gid
    FROM extended AS e
    CROSS JOIN LATERAL unnest(retention_hashes(e.others)) AS x(hash)
    JOIN case_due AS o ON o.series = e.series AND o.hash = x.hash
    JOIN unindexed_roots AS ur ON ur.series = o.series AND ur.root = o.root
    WHERE octet_length(e.others) > 0
    UNION
    SELECT e.gid FROM extended AS e
    WHERE EXISTS (SELECT 1 FROM unindexed AS u WHERE u.series = e.series AND u.hashes IS NULL)
       OR (octet_length(e.hash) = 0 AND EXISTS (
             SELECT 1 FROM unindexed AS u WHERE u.series = e.series
               AND u.first_record_at < ((e.day + 1)::timestamp AT TIME ZONE 'UTC') AND u.last_record_at >= (e.day::timestamp AT TIME ZONE 'UTC')))
), dated AS (
    SELECT e.*,
           CASE WHEN e.own_due IS NULL OR co.any_unknown THEN NULL ELSE GREATEST(e.own_due, co.co_due) END::date AS due,
           (un.gid IS NOT NULL) AS unsure
    FROM extended AS e
    LEFT JOIN co ON co.gid = e.gid
    LEFT JOIN (SELECT DISTINCT gid FROM unsure) AS un ON un.gid = e.gid
)
SELECT d.series::text AS series, d.hash::bytea AS subject_hash, d.others::bytea AS others, d.item_id::text AS item_id, d.due::date AS due,
       d.oldest::date AS oldest, d.newest::date AS newest, d.hot_rows, d.archived_rows, d.archives,
       d.day::date AS day,
       (SELECT oc.disposition_id FROM disposition_cases AS oc JOIN dispositions AS od ON od.disposition_id = oc.disposition_id
        WHERE od.status IN ('proposed', 'executing') AND oc.series = d.series AND oc.subject_hash = d.hash AND oc.day IS NOT DISTINCT FROM d.day
        LIMIT 1)::uuid AS open_batch,
       d.box::bytea AS subject_box,
       coalesce((SELECT array_agg(h.id ORDER BY h.id) FROM archive_holds AS h
                 WHERE h.released_at IS NULL AND (
                       (octet_length(d.hash) > 0 AND h.subject_hashes @> ARRAY[d.hash])
                    OR h.subject_hashes && retention_hashes(d.others)
                    OR h.archive_ids && d.archives
                    OR EXISTS (SELECT 1 FROM archive_subjects AS s WHERE s.archive_id = ANY (d.archives) AND s.subject_hashes && h.subject_hashes)
                    OR EXISTS (SELECT 1 FROM archive_ledger AS l WHERE l.archive_id = ANY (d.archives) AND h.table_name = l.table_name
                                 AND (h.from_at IS NULL OR l.last_record_at >= h.from_at) AND (h.to_at IS NULL OR l.first_record_at < h.to_at))
                    OR (d.hot_rows > 0 AND h.table_name = d.series
                        AND (h.from_at IS NULL OR h.from_at < ((d.newest + 1)::timestamp AT TIME ZONE 'UTC'))
                        AND (h.to_at IS NULL OR h.to_at > (d.oldest::timestamp AT TIME ZONE 'UTC')))
                 )), '{}')::uuid[] AS holds
FROM dated AS d
WHERE d.due <= sqlc.arg(as_of)::date AND NOT d.unsure
ORDER BY d.item_id, d.due, d.series, d.hash, d.others;

-- ReplaceClockHash replaces an expunged case's keyed hash by its order's
-- commitment in the case clocks (its own and the clocks merged into it).
-- name: ReplaceClockHash :execrows
UPDATE case_clocks
SET subject_hash = CASE WHEN subject_hash = sqlc.arg(old_hash) THEN sqlc.arg(new_hash)::bytea ELSE subject_hash END,
    merged_into = CASE WHEN merged_into = sqlc.arg(old_hash) THEN sqlc.arg(new_hash)::bytea ELSE merged_into END,
    updated_at = now()
WHERE subject_hash = sqlc.arg(old_hash) OR merged_into = sqlc.arg(old_hash);

-- ReplaceClockEventHash does the same in the accepted case events (under
-- the expungement's bypass of their insert-only trigger).
-- name: ReplaceClockEventHash :execrows
UPDATE case_clock_events
SET subject_hash = CASE WHEN subject_hash = sqlc.arg(old_hash) THEN sqlc.arg(new_hash)::bytea ELSE subject_hash END,
    merged_into = CASE WHEN merged_into = sqlc.arg(old_hash) THEN sqlc.arg(new_hash)::bytea ELSE merged_into END
WHERE subject_hash = sqlc.arg(old_hash) OR merged_into = sqlc.arg(old_hash);

-- LockDispositions serializes batch freezes and decisions (a
-- transaction-scoped lock): a case is in one open batch at most.
-- name: LockDispositions :exec
SELECT pg_advisory_xact_lock(sqlc.arg(key)::bigint);

-- OpenDispositionCases are the cases of the batches not yet decided.
-- name: OpenDispositionCases :many
SELECT c.series, c.subject_hash, c.day
FROM disposition_cases AS c JOIN dispositions AS d ON d.disposition_id = c.disposition_id
WHERE d.status IN ('proposed', 'executing');

-- InsertDisposition records a frozen batch.
-- name: InsertDisposition :exec
INSERT INTO dispositions (disposition_id, status, schedule_version, as_of, row_limit, rows, proposed_by)
VALUES (sqlc.arg(disposition_id), 'proposed', sqlc.arg(schedule_version), sqlc.arg(as_of), sqlc.arg(row_limit), sqlc.arg(rows), sqlc.arg(proposed_by));

-- InsertDispositionCase records one case of a batch.
-- name: InsertDispositionCase :exec
INSERT INTO disposition_cases (disposition_id, ord, series, subject_hash, subject_box, day, item_id, authority, due, rows_hot, rows_archived, archives)
VALUES (sqlc.arg(disposition_id), sqlc.arg(ord), sqlc.arg(series), sqlc.arg(subject_hash), sqlc.narg(subject_box), sqlc.narg(day),
        sqlc.arg(item_id), sqlc.arg(authority), sqlc.arg(due), sqlc.arg(rows_hot), sqlc.arg(rows_archived), sqlc.arg(archives)::uuid[]);

-- GetDisposition reads a batch.
-- name: GetDisposition :one
SELECT * FROM dispositions WHERE disposition_id = sqlc.arg(disposition_id);

-- DispositionCases reads a batch's cases in order.
-- name: DispositionCases :many
SELECT * FROM disposition_cases WHERE disposition_id = sqlc.arg(disposition_id) ORDER BY ord;

-- RejectDisposition returns a proposed batch to the schedule.
-- name: RejectDisposition :execrows
UPDATE dispositions
SET status = 'rejected', rejected_by = sqlc.arg(rejected_by), rejected_at = now(), reject_reason = sqlc.arg(reason), extend_until = sqlc.narg(extend_until)
WHERE disposition_id = sqlc.arg(disposition_id) AND status = 'proposed';

-- ExtendDispositionCases records the extension of every case of a batch.
-- name: ExtendDispositionCases :execrows
INSERT INTO disposition_extensions (disposition_id, series, subject_hash, day, until, reason, extended_by)
SELECT c.disposition_id, c.series, c.subject_hash, c.day, sqlc.arg(until), sqlc.arg(reason), sqlc.arg(extended_by)
FROM disposition_cases AS c WHERE c.disposition_id = sqlc.arg(disposition_id);

-- ReplaceDispositionHash replaces an expunged case's hash by its order's
-- commitment in the batches and extensions, and drops its sealed
-- spelling.
-- name: ReplaceDispositionHash :execrows
UPDATE disposition_cases SET subject_hash = sqlc.arg(new_hash), subject_box = NULL WHERE subject_hash = sqlc.arg(old_hash);

-- ReplaceExtensionHash does the same for the extensions.
-- name: ReplaceExtensionHash :execrows
UPDATE disposition_extensions SET subject_hash = sqlc.arg(new_hash) WHERE subject_hash = sqlc.arg(old_hash);

-- StartDisposition records a proposed batch's approval: from then on it is
-- executing, and every call finishes it.
-- name: StartDisposition :execrows
UPDATE dispositions SET status = 'executing', approved_by = sqlc.arg(approved_by), approved_at = now()
WHERE disposition_id = sqlc.arg(disposition_id) AND status = 'proposed';

-- LockClocksShare orders a batch's destroying transaction with case events
-- (a transaction-scoped table lock): an event that would stop a case from
-- falling due waits for it, or is seen by its re-check.
-- name: LockClocksShare :exec
LOCK TABLE case_clocks IN SHARE MODE;

-- DispositionStamp is what a batch's due cases depend on besides the rows:
-- the holds (placed ever, active), the case events applied (every clock
-- change records one, and none is ever deleted: a count, unlike a time,
-- moves when a transaction that began earlier commits), the extensions
-- and the schedule's approvals. The same stamp: what was due is still due.
-- name: DispositionStamp :one
SELECT (SELECT count(*) FROM archive_holds)::bigint AS holds,
       (SELECT count(*) FROM archive_holds WHERE released_at IS NULL)::bigint AS active_holds,
       (SELECT count(*) FROM case_clocks)::bigint AS clocks,
       (SELECT count(*) FROM case_clock_events)::bigint AS clock_events,
       (SELECT count(*) FROM disposition_extensions)::bigint AS extensions,
       (SELECT count(*) FROM retention_schedules WHERE approved_at IS NOT NULL)::bigint AS approvals;

-- DispositionArchives reads the unpurged ledger rows of the archives a
-- batch rewrites, oldest first.
-- name: DispositionArchives :many
SELECT l.archive_id, l.table_name, l.data_key, l.manifest_key, l.data_sha256, l.record_count,
       l.hot_window_days, l.archived_at, l.archived_by, l.retention_until, l.legal_hold, l.store_endpoint, l.store_bucket,
       '{}'::uuid[] AS blocking_holds
FROM archive_ledger AS l
WHERE l.archive_id = ANY (sqlc.arg(archive_ids)::uuid[]) AND l.purged_at IS NULL
ORDER BY l.first_record_at, l.archive_id;

-- SetDispositionCaseOutcome records what the execution did to a case, and
-- erases its sealed spelling (an executed batch names its cases by hash
-- only).
-- name: SetDispositionCaseOutcome :execrows
UPDATE disposition_cases
SET outcome = sqlc.arg(outcome), outcome_reason = sqlc.narg(outcome_reason), rows_destroyed = sqlc.arg(rows_destroyed), subject_box = NULL
WHERE disposition_id = sqlc.arg(disposition_id) AND ord = sqlc.arg(ord);

-- CompleteDisposition records an executed batch.
-- name: CompleteDisposition :execrows
UPDATE dispositions
SET status = 'executed', executed_at = sqlc.arg(executed_at), certificate_key = sqlc.arg(certificate_key), rows_destroyed = sqlc.arg(rows_destroyed),
    archives_rewritten = sqlc.arg(archives_rewritten), archives_purged = sqlc.arg(archives_purged)
WHERE disposition_id = sqlc.arg(disposition_id) AND status = 'executing';

-- SubjectDisposals are the executed batches that destroyed rows of a case
-- (all of them, or some: a case no longer due part way through its batch):
-- what a records request that arrives later is answered.
-- name: SubjectDisposals :many
SELECT d.disposition_id, d.executed_at, c.item_id, c.authority, c.series, c.rows_destroyed
FROM disposition_cases AS c JOIN dispositions AS d ON d.disposition_id = c.disposition_id
WHERE c.subject_hash = sqlc.arg(subject_hash) AND d.status = 'executed' AND c.rows_destroyed > 0
ORDER BY d.executed_at, d.disposition_id, c.ord;

-- AddDispositionCaseRows adds rows destroyed to a case of a batch, in the
-- transaction that destroys them.
-- name: AddDispositionCaseRows :execrows
UPDATE disposition_cases SET rows_destroyed = rows_destroyed + sqlc.arg(rows)
WHERE disposition_id = sqlc.arg(disposition_id) AND ord = sqlc.arg(ord);

-- ReapplyDisposition records again an executed batch a database restore
-- forgot (from its journal entry).
-- name: ReapplyDisposition :exec
INSERT INTO dispositions (disposition_id, status, schedule_version, as_of, row_limit, rows, proposed_by, proposed_at, approved_by, approved_at,
                          executed_at, certificate_key, rows_destroyed, archives_rewritten, archives_purged)
VALUES (sqlc.arg(disposition_id), 'executed', sqlc.arg(schedule_version), sqlc.arg(as_of), sqlc.arg(row_limit), sqlc.arg(rows), sqlc.arg(proposed_by),
        sqlc.arg(proposed_at), sqlc.arg(approved_by), sqlc.arg(approved_at), sqlc.arg(executed_at), sqlc.arg(certificate_key),
        sqlc.arg(rows_destroyed), sqlc.arg(archives_rewritten), sqlc.arg(archives_purged))
ON CONFLICT (disposition_id) DO UPDATE
SET status = 'executed', approved_by = EXCLUDED.approved_by, approved_at = EXCLUDED.approved_at, executed_at = EXCLUDED.executed_at,
    certificate_key = EXCLUDED.certificate_key, rows_destroyed = EXCLUDED.rows_destroyed, archives_rewritten = EXCLUDED.archives_rewritten,
    archives_purged = EXCLUDED.archives_purged;

-- ReapplyDispositionCase records again one case of an executed batch a
-- database restore forgot (by keyed hash only).
-- name: ReapplyDispositionCase :exec
INSERT INTO disposition_cases (disposition_id, ord, series, subject_hash, day, item_id, authority, due, rows_hot, rows_archived, archives,
                               outcome, outcome_reason, rows_destroyed)
VALUES (sqlc.arg(disposition_id), sqlc.arg(ord), sqlc.arg(series), sqlc.arg(subject_hash), sqlc.narg(day), sqlc.arg(item_id), sqlc.arg(authority),
        sqlc.arg(due), sqlc.arg(rows_hot), sqlc.arg(rows_archived), sqlc.arg(archives)::uuid[], sqlc.arg(outcome), sqlc.narg(outcome_reason),
        sqlc.arg(rows_destroyed))
ON CONFLICT (disposition_id, ord) DO UPDATE
SET outcome = EXCLUDED.outcome, outcome_reason = EXCLUDED.outcome_reason, rows_destroyed = EXCLUDED.rows_destroyed, subject_box = NULL;

-- ExecutingDispositions are the batches a proposer froze that are not
-- decided yet or stopped part way through their execution (the next call
-- of the scheduled worker finishes each).
-- name: ExecutingDispositions :many
SELECT disposition_id FROM dispositions WHERE status IN ('proposed', 'executing') AND proposed_by = sqlc.arg(proposed_by) ORDER BY disposition_id;

-- ArchiveDueFacts reads, per unpurged archive of the given tables (of the
-- given ids; none: every one), its case groups as the case-rows index
-- holds them and how many of its rows they count (fewer than its records:
-- some row's case field cannot be read, and the archive is never wholly
-- due).
-- name: ArchiveDueFacts :many
SELECT l.archive_id, l.table_name, l.record_count, l.case_rows_indexed,
       coalesce(array_agg(c.subject_hash ORDER BY c.subject_hash, c.others) FILTER (WHERE c.archive_id IS NOT NULL), '{}')::bytea[] AS hashes,
       coalesce(array_agg(c.others ORDER BY c.subject_hash, c.others) FILTER (WHERE c.archive_id IS NOT NULL), '{}')::bytea[] AS others,
       coalesce(array_agg(c.newest_day ORDER BY c.subject_hash, c.others) FILTER (WHERE c.archive_id IS NOT NULL), '{}')::date[] AS days,
       coalesce(sum(c.rows), 0)::bigint AS case_rows
FROM archive_ledger AS l LEFT JOIN archive_cases AS c ON c.archive_id = l.archive_id
WHERE l.purged_at IS NULL AND l.table_name = ANY (sqlc.arg(tables)::text[])
  AND (cardinality(sqlc.arg(ids)::uuid[]) = 0 OR l.archive_id = ANY (sqlc.arg(ids)::uuid[]))
GROUP BY l.archive_id, l.table_name, l.record_count, l.case_rows_indexed
ORDER BY l.archive_id;

-- SetDerivedRetention dates archives by the schedule in force: each the
-- day its last row falls due, or none while any of its rows has no date.
-- name: SetDerivedRetention :execrows
UPDATE archive_ledger AS l SET retention_until = v.until
FROM (SELECT unnest(sqlc.arg(ids)::uuid[]) AS id, unnest(sqlc.arg(untils)::date[]) AS until) AS v
WHERE l.archive_id = v.id AND l.purged_at IS NULL AND l.retention_until IS DISTINCT FROM v.until;

-- ReapplyRejection records again a rejected batch a database restore
-- forgot (from its journal entry); its cases are recorded by
-- ReapplyDispositionCase.
-- name: ReapplyRejection :exec
INSERT INTO dispositions (disposition_id, status, schedule_version, as_of, row_limit, rows, proposed_by, proposed_at, rejected_by, rejected_at,
                          reject_reason, extend_until)
VALUES (sqlc.arg(disposition_id), 'rejected', sqlc.arg(schedule_version), sqlc.arg(as_of), sqlc.arg(row_limit), sqlc.arg(rows),
        sqlc.arg(proposed_by), sqlc.arg(proposed_at), sqlc.arg(rejected_by), sqlc.arg(rejected_at), sqlc.arg(reason), sqlc.narg(extend_until))
ON CONFLICT (disposition_id) DO UPDATE
SET status = 'rejected', rejected_by = EXCLUDED.rejected_by, rejected_at = EXCLUDED.rejected_at, reject_reason = EXCLUDED.reject_reason,
    extend_until = EXCLUDED.extend_until;

-- HasExtensions says whether a batch's extensions are recorded.
-- name: HasExtensions :one
SELECT EXISTS (SELECT 1 FROM disposition_extensions WHERE disposition_id = sqlc.arg(disposition_id));

-- ArchivedCaseLeft says whether an unpurged archive of a series still
-- holds rows of a case (for rows about no case, of that day), or an
-- archive of it is not indexed by case (it may).
-- name: ArchivedCaseLeft :one
SELECT EXISTS (
    SELECT 1 FROM archive_cases AS c JOIN archive_ledger AS l ON l.archive_id = c.archive_id
    WHERE l.purged_at IS NULL AND l.table_name = sqlc.arg(series) AND c.subject_hash = sqlc.arg(subject_hash)
      AND (octet_length(c.subject_hash) > 0 OR c.newest_day = sqlc.narg(day))
) OR EXISTS (
    SELECT 1 FROM archive_ledger AS l WHERE l.purged_at IS NULL AND l.table_name = sqlc.arg(series) AND NOT l.case_rows_indexed
);
