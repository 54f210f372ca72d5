-- access_reviews: every periodic review of who may see a case's records.
-- A record of the system of truth: archived after its own hot window, then
-- deleted; insert-only, enforced by the database.

-- +goose Up
CREATE TABLE access_reviews (
    id          uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    reviewed_at timestamptz NOT NULL DEFAULT now(),
    case_ref    text        NOT NULL,
    reviewer    text        NOT NULL,
    outcome     text        NOT NULL
);

-- Archive selection: oldest first with a (reviewed_at, id) keyset cursor.
CREATE INDEX access_reviews_reviewed_at_id_idx ON access_reviews (reviewed_at, id);
-- Subject reads: the case a review is about.
CREATE INDEX access_reviews_case_idx ON access_reviews (retention_subject('case', case_ref));

CREATE TRIGGER access_reviews_insert_only
    BEFORE UPDATE ON access_reviews
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();

-- +goose Down
DROP TABLE access_reviews;
