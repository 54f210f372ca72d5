-- rule_evaluations is insert-only, now enforced by the database: an UPDATE
-- between the archive's SELECT and its DELETE would silently lose the new
-- version (ADR-058, seed D18). The function comes from the transport set
-- (00004_retention_refuse_update.sql).

-- +goose Up
CREATE TRIGGER rule_evaluations_insert_only
    BEFORE UPDATE ON rule_evaluations
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();

-- +goose Down
DROP TRIGGER rule_evaluations_insert_only ON rule_evaluations;
