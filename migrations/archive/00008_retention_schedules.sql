-- The service's records schedule (ADR-073): every version ever proposed,
-- append-only. A version is proposed by one identity and approved by a
-- second; the version in force is the approved one approved last. Until one
-- is approved, archive.retention.<table>_days holds.

-- +goose Up
CREATE TABLE retention_schedules (
    version     text        PRIMARY KEY,
    -- The document as validated: this service's items, the action
    -- defaulted (schedule.Document as JSON).
    document    jsonb       NOT NULL,
    proposed_by text        NOT NULL,
    proposed_at timestamptz NOT NULL DEFAULT now(),
    -- Rows (hot and archived) of the series some row of which the version
    -- could make due earlier than the version in force when it was
    -- proposed; approval counts again against the one then in force.
    nearer      bigint      NOT NULL CHECK (nearer >= 0),
    approved_by text,
    approved_at timestamptz,
    CHECK ((approved_by IS NULL) = (approved_at IS NULL))
);
CREATE UNIQUE INDEX retention_schedules_approved_idx ON retention_schedules (approved_at) WHERE approved_at IS NOT NULL;

-- Append-only: a version is never deleted, its document never changed; its
-- approval is written once.
-- +goose StatementBegin
CREATE FUNCTION retention_schedules_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'retention_schedules is append-only: a schedule version is never deleted';
    END IF;
    IF OLD.approved_at IS NOT NULL OR NEW.version IS DISTINCT FROM OLD.version OR NEW.document IS DISTINCT FROM OLD.document
       OR NEW.proposed_by IS DISTINCT FROM OLD.proposed_by OR NEW.proposed_at IS DISTINCT FROM OLD.proposed_at
       OR NEW.nearer IS DISTINCT FROM OLD.nearer THEN
        RAISE EXCEPTION 'retention_schedules is append-only: only a proposed version''s approval is written, once';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER retention_schedules_append_only
    BEFORE UPDATE OR DELETE ON retention_schedules
    FOR EACH ROW EXECUTE FUNCTION retention_schedules_append_only();
CREATE TRIGGER retention_schedules_no_truncate
    BEFORE TRUNCATE ON retention_schedules
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();

-- +goose Down
-- A records schedule's history is never dropped by a down migration.
SELECT 1;
