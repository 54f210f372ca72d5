-- The records schedule's versions (migrations/archive/00008, ADR-073).

-- LockSchedules serializes proposals and approvals (a transaction-scoped
-- lock): the version in force is read and replaced by one at a time.
-- name: LockSchedules :exec
SELECT pg_advisory_xact_lock(sqlc.arg(key)::bigint);

-- ProposeSchedule records a proposed version; none when the version
-- exists.
-- name: ProposeSchedule :one
INSERT INTO retention_schedules (version, document, proposed_by, nearer)
VALUES (sqlc.arg(version), sqlc.arg(document)::jsonb, sqlc.arg(proposed_by), sqlc.arg(nearer))
ON CONFLICT (version) DO NOTHING
RETURNING proposed_at;

-- ScheduleVersion is one version.
-- name: ScheduleVersion :one
SELECT version, document, proposed_by, proposed_at, nearer, approved_by, approved_at
FROM retention_schedules WHERE version = sqlc.arg(version);

-- ScheduleInForce is the version approved last.
-- name: ScheduleInForce :many
SELECT version, document, proposed_by, proposed_at, nearer, approved_by, approved_at
FROM retention_schedules WHERE approved_at IS NOT NULL
ORDER BY approved_at DESC LIMIT 1;

-- ScheduleHistory is every version, newest first.
-- name: ScheduleHistory :many
SELECT version, document, proposed_by, proposed_at, nearer, approved_by, approved_at
FROM retention_schedules
ORDER BY COALESCE(approved_at, proposed_at) DESC, version;

-- ApproveSchedule puts a proposed version in force.
-- name: ApproveSchedule :one
UPDATE retention_schedules SET approved_by = sqlc.arg(approved_by), approved_at = clock_timestamp()
WHERE version = sqlc.arg(version) AND approved_at IS NULL
RETURNING approved_at;

-- ArchivedRows counts the rows of the given tables the ledger books in
-- archives not purged.
-- name: ArchivedRows :one
SELECT COALESCE(sum(record_count), 0)::bigint FROM archive_ledger
WHERE table_name = ANY (sqlc.arg(tables)::text[]) AND purged_at IS NULL;

-- RestoreSchedule records a version a journal entry approved and the
-- database lost (restored from a backup): as proposed then, approved then.
-- name: RestoreSchedule :exec
INSERT INTO retention_schedules (version, document, proposed_by, proposed_at, nearer)
VALUES (sqlc.arg(version), sqlc.arg(document)::jsonb, sqlc.arg(proposed_by), sqlc.arg(proposed_at), sqlc.arg(nearer))
ON CONFLICT (version) DO NOTHING;

-- RestoreApproval approves a version at the time its journal entry
-- recorded; nothing when it is approved already.
-- name: RestoreApproval :execrows
UPDATE retention_schedules SET approved_by = sqlc.arg(approved_by), approved_at = sqlc.arg(approved_at)
WHERE version = sqlc.arg(version) AND approved_at IS NULL;
