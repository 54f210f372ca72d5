-- retention_refuse_update(): the trigger function that makes an archived
-- table insert-only in the database (ADR-058, seed D18). Archive-then-prune
-- selects rows, writes them to the object store, then deletes them by id; an
-- UPDATE in between would be deleted without its new version ever being
-- archived. Every archiving service's archived tables get a
--   BEFORE UPDATE ... FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update()
-- trigger in the service's own migrations (the kernel's boot and probe check
-- it is there). It lives in the transport set so that every service database
-- has it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION retention_refuse_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'table % is insert-only: its rows are archived as written and then deleted, so an UPDATE would be lost (ADR-058, seed D18)', TG_TABLE_NAME
        USING ERRCODE = 'feature_not_supported',
              HINT = 'insert a new row instead of updating one';
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION retention_refuse_update();
