-- Where the next archive pass starts (ADR-071): passes go round-robin
-- across the service's archived tables from the table after the last one
-- a pass gave a batch, so a small budget reaches every table in turn
-- whichever process runs the pass (serve, `archive run`, the API).

-- +goose Up
CREATE TABLE archive_pass_cursor (
    -- One row per service database.
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    -- The table the next pass offers a batch first; a name no longer
    -- archived is passed over (the pass starts at the first table).
    next_table text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE archive_pass_cursor;
