-- rule_overrides: every manual override of a rule's outcome, with who and
-- why. A record of the system of truth: archived after the hot window, then
-- deleted; insert-only, enforced by the database.

-- +goose Up
CREATE TABLE rule_overrides (
    id            uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    overridden_at timestamptz NOT NULL DEFAULT now(),
    rule_id       text        NOT NULL,
    overridden_by text        NOT NULL,
    reason        text        NOT NULL
);

-- Archive selection: oldest first with an (overridden_at, id) keyset cursor.
CREATE INDEX rule_overrides_overridden_at_id_idx ON rule_overrides (overridden_at, id);

CREATE TRIGGER rule_overrides_insert_only
    BEFORE UPDATE ON rule_overrides
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();

-- +goose Down
DROP TABLE rule_overrides;
