-- The archive lifecycle (issue 12; seed D11, D12, D14, D15): each local
-- archive_ledger row gains its retention date, its legal-hold state and its
-- purge stamp; legal holds are first-class records; every purge is a row of
-- purges (its destruction list, who asked, who approved, its certificate);
-- every lifecycle act is logged with who, when and why.

-- +goose Up
ALTER TABLE archive_ledger
    -- NULL: no date, never purgeable (D14).
    ADD COLUMN IF NOT EXISTS retention_until date,
    -- True exactly while an active hold covers the archive.
    ADD COLUMN IF NOT EXISTS legal_hold      boolean     NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS purged_at       timestamptz,
    ADD COLUMN IF NOT EXISTS purged_by       text,
    ADD COLUMN IF NOT EXISTS purge_id        uuid;

-- A legal hold covers the archives it names and/or those of a table whose
-- record times overlap [from_at, to_at) (either bound open), including
-- archives booked later, until it is released (with a reason).
CREATE TABLE archive_holds (
    id             uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    title          text        NOT NULL CHECK (btrim(title) <> ''),
    reason         text        NOT NULL CHECK (btrim(reason) <> ''),
    table_name     text,
    from_at        timestamptz,
    to_at          timestamptz,
    archive_ids    uuid[]      NOT NULL DEFAULT '{}',
    created_by     text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    released_at    timestamptz,
    released_by    text,
    release_reason text,
    CHECK (from_at IS NULL OR to_at IS NULL OR from_at < to_at),
    CHECK (cardinality(archive_ids) > 0 OR table_name IS NOT NULL),
    CHECK ((released_at IS NULL) = (released_by IS NULL) AND (released_at IS NULL) = (release_reason IS NULL))
);
CREATE INDEX archive_holds_active_idx ON archive_holds (table_name) WHERE released_at IS NULL;

-- archive_is_held: whether an active hold covers the archive (by id, or by
-- table and record-time overlap). Every purge statement re-checks it besides
-- the legal_hold column.
-- +goose StatementBegin
CREATE FUNCTION archive_is_held(p_archive_id uuid, p_table text, p_first timestamptz, p_last timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM archive_holds AS h
        WHERE h.released_at IS NULL
          AND (p_archive_id = ANY (h.archive_ids)
               OR (h.table_name = p_table
                   AND (h.from_at IS NULL OR p_last >= h.from_at)
                   AND (h.to_at IS NULL OR p_first < h.to_at))))
$$;
-- +goose StatementEnd

-- A purge: its frozen destruction list; executed once (directly, or on
-- approval by another operator); the certificate object names it.
CREATE TABLE purges (
    purge_id        uuid        PRIMARY KEY,
    status          text        NOT NULL CHECK (status IN ('awaiting_approval', 'executed')),
    candidates      uuid[]      NOT NULL,
    requested_by    text        NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    approved_by     text,
    executed_at     timestamptz,
    purged          uuid[]      NOT NULL DEFAULT '{}',
    skipped         uuid[]      NOT NULL DEFAULT '{}',
    certificate_key text,
    CHECK (approved_by IS NULL OR approved_by <> requested_by)
);

-- Who did what to which archive, when and why (retention dates, holds,
-- purges): never updated, never deleted.
CREATE TABLE archive_lifecycle_log (
    id         uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL,
    action     text        NOT NULL,
    archive_id uuid,
    hold_id    uuid,
    purge_id   uuid,
    detail     jsonb       NOT NULL DEFAULT '{}'
);
CREATE TRIGGER archive_lifecycle_log_insert_only
    BEFORE UPDATE ON archive_lifecycle_log
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();

-- +goose Down
-- The ledger's lifecycle and its log are never dropped by a down migration.
SELECT 1;
