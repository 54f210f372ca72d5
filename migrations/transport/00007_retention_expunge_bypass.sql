-- The one sanctioned bypass of the insert-only trigger (issue 27, ADR-067):
-- a court-ordered expungement replaces a subject's keyed hash by the
-- order's salted commitment in insert-only records (the archive lifecycle
-- log), so that nothing left behind can confirm whom the order was about.
-- It sets craig.expunge_id with set_config(..., true), which lasts only
-- until its transaction ends, and records that it did in the lifecycle log
-- of the same transaction. It opens the lifecycle log only: every other
-- UPDATE of an insert-only table (the archived tables among them) is
-- refused as before.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION retention_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'archive_lifecycle_log' AND coalesce(current_setting('craig.expunge_id', true), '') <> '' THEN
        RAISE LOG 'insert-only table % updated by expungement %', TG_TABLE_NAME, current_setting('craig.expunge_id', true);
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'table % is insert-only: its rows are archived as written and then deleted, so an UPDATE would be lost (ADR-058, seed D18)', TG_TABLE_NAME
        USING ERRCODE = 'feature_not_supported',
              HINT = 'insert a new row instead of updating one';
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- The bypass is withdrawn by restoring the function of 00004.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION retention_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'table % is insert-only: its rows are archived as written and then deleted, so an UPDATE would be lost (ADR-058, seed D18)', TG_TABLE_NAME
        USING ERRCODE = 'feature_not_supported',
              HINT = 'insert a new row instead of updating one';
END;
$$;
-- +goose StatementEnd
