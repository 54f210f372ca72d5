-- The security service's audit trail and the fleet ledger (issue 11; seed
-- D8, D9, D13, D16, H11, unit B2).
--
-- audit_log and dead_letter_audit are records of the system of truth: never
-- swept, archived to the object store after the 90-day hot window and only
-- then deleted (kernel archive engine, security's TableSpecs). Both are
-- insert-only, enforced by the database (ADR-058, seed D18): an UPDATE
-- between an archive's SELECT and its DELETE would silently lose the new
-- version. Each has the (age, id) index the archive selection walks (H11).
--
-- archive_records is the FLEET ledger: one row per archive of ANY service,
-- security's own written in the archive's delete transaction, the others'
-- from their validated *_archived events (D16). It is bookkeeping about the
-- fleet; each service's local archive_ledger stays the truth for its own
-- purge and GC (D8).

-- +goose Up
CREATE TABLE audit_log (
    id          uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    occurred_at timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    action      text        NOT NULL,
    subject_id  text,
    detail      jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_occurred_at_id_idx ON audit_log (occurred_at, id);
CREATE TRIGGER audit_log_insert_only
    BEFORE UPDATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();

CREATE TABLE dead_letter_audit (
    id              uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    dlq_received_at timestamptz NOT NULL DEFAULT now(),
    event_type      text        NOT NULL,
    payload         jsonb       NOT NULL,
    reason          text        NOT NULL
);
CREATE INDEX dead_letter_audit_dlq_received_at_id_idx ON dead_letter_audit (dlq_received_at, id);
CREATE TRIGGER dead_letter_audit_insert_only
    BEFORE UPDATE ON dead_letter_audit
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();

CREATE TABLE archive_records (
    archive_id       uuid        PRIMARY KEY,
    source_service   text        NOT NULL,
    table_name       text        NOT NULL,
    data_key         text        NOT NULL,
    manifest_key     text        NOT NULL,
    data_sha256      text        NOT NULL,
    record_count     integer     NOT NULL,
    store_endpoint   text        NOT NULL,
    store_bucket     text        NOT NULL,
    first_record_id  uuid        NOT NULL,
    last_record_id   uuid        NOT NULL,
    first_record_at  timestamptz NOT NULL,
    last_record_at   timestamptz NOT NULL,
    hot_window_days  integer     NOT NULL,
    archived_at      timestamptz NOT NULL,
    archived_by      text        NOT NULL,
    -- The operator's display name; NULL at insert (B2 J-review).
    archived_by_name text,
    -- Set by the retention schedule (the lifecycle API); NULL = not yet
    -- scheduled, so never purgeable (D14).
    retention_until  date,
    legal_hold       boolean     NOT NULL DEFAULT false,
    purged_at        timestamptz,
    purged_by        text,
    recorded_at      timestamptz NOT NULL DEFAULT now()
);
-- Addressability (D17): which archive holds record id X.
CREATE INDEX archive_records_record_range_idx ON archive_records (first_record_id, last_record_id);

-- +goose Down
-- The audit trail and the ledgers are never dropped by a down migration.
SELECT 1;
