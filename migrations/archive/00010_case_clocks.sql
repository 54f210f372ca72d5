-- Case clocks (ADR-073): what starts a schedule item's `case.closed`
-- clock. Per case, keyed by the subject's keyed hash (never the case
-- number in clear): closed (since when, with which classification),
-- reopened (nothing of it falls due), or merged into another case (its
-- rows follow that case's clock). Every accepted event is kept.

-- +goose Up
CREATE TABLE case_clocks (
    subject_hash   bytea       PRIMARY KEY,
    state          text        NOT NULL CHECK (state IN ('closed', 'reopened', 'merged')),
    closed_at      timestamptz,
    classification text,
    merged_into    bytea,
    -- The time of the event that last changed the clock: an event older
    -- than it is refused as stale.
    changed_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((state = 'closed') = (closed_at IS NOT NULL)),
    CHECK ((state = 'merged') = (merged_into IS NOT NULL))
);

CREATE TABLE case_clock_events (
    id             uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    subject_hash   bytea       NOT NULL,
    type           text        NOT NULL CHECK (type IN ('case.closed', 'case.reopened', 'case.merged')),
    at             timestamptz NOT NULL,
    classification text,
    merged_into    bytea,
    -- Who: an event's producer (event:<service>) or an API identity.
    source         text        NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX case_clock_events_subject_idx ON case_clock_events (subject_hash, at);
CREATE TRIGGER case_clock_events_insert_only
    BEFORE UPDATE ON case_clock_events
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();

-- +goose Down
-- A case's clock decides when its records are destroyed: never dropped by a
-- down migration.
SELECT 1;
