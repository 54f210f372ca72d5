-- archive_ledger: the LOCAL ledger of every archive a service wrote (seed D8),
-- inserted in the same transaction that deletes the archived rows. It is the
-- truth for what was archived where: purge, holds, fetch, verify and orphan
-- GC read it, never the fleet copy. This set is applied to every archiving
-- service's database after the service's own set (migrations.ForService),
-- and the kernel's archive.Bookkeeper writes it.
--
-- rules created the same table in its own 00001 migration before this set
-- existed; IF NOT EXISTS adopts it (landed migrations are never edited).

-- +goose Up
CREATE TABLE IF NOT EXISTS archive_ledger (
    archive_id      uuid        PRIMARY KEY,
    table_name      text        NOT NULL,
    data_key        text        NOT NULL,
    manifest_key    text        NOT NULL,
    data_sha256     text        NOT NULL,
    record_count    integer     NOT NULL CHECK (record_count > 0),
    store_endpoint  text        NOT NULL CHECK (store_endpoint <> ''),
    store_bucket    text        NOT NULL CHECK (store_bucket <> ''),
    first_record_id uuid        NOT NULL,
    last_record_id  uuid        NOT NULL,
    first_record_at timestamptz NOT NULL,
    last_record_at  timestamptz NOT NULL,
    hot_window_days integer     NOT NULL,
    archived_at     timestamptz NOT NULL,
    archived_by     text        NOT NULL
);

-- Addressability (D17): which archive holds record id X.
CREATE INDEX IF NOT EXISTS archive_ledger_record_range_idx ON archive_ledger (first_record_id, last_record_id);

-- +goose Down
-- The ledger is the only record of where archives are: it is never dropped
-- by a down migration.
SELECT 1;
