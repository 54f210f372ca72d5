-- rule_evaluations: the ONLY copy of every rule evaluation's input and output.
-- A record of the system of truth: never swept, only archived-then-pruned
-- (ADR-058). INSERT-ONLY: archive-then-prune selects rows, writes them to the
-- object store, then deletes them by id; an UPDATE in between would archive a
-- stale version. No code updates these rows; keep it that way.
--
-- archive_ledger: the rules service's LOCAL ledger of every archive it wrote,
-- inserted in the same transaction that deletes the archived rows. It is the
-- truth for what was archived where; the rules.evaluations_archived event to
-- security is secondary fleet bookkeeping.

-- +goose Up
CREATE TABLE rule_evaluations (
    id           uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    evaluated_at timestamptz NOT NULL DEFAULT now(),
    rule_id      text        NOT NULL,
    input        jsonb       NOT NULL,
    output       jsonb       NOT NULL
);

-- Archive selection: oldest first with an (evaluated_at, id) keyset cursor.
CREATE INDEX rule_evaluations_evaluated_at_id_idx ON rule_evaluations (evaluated_at, id);

CREATE TABLE archive_ledger (
    archive_id      uuid        PRIMARY KEY,
    table_name      text        NOT NULL,
    data_key        text        NOT NULL,
    manifest_key    text        NOT NULL,
    data_sha256     text        NOT NULL,
    record_count    integer     NOT NULL CHECK (record_count > 0),
    store_endpoint  text        NOT NULL CHECK (store_endpoint <> ''),
    store_bucket    text        NOT NULL CHECK (store_bucket <> ''),
    first_record_id uuid        NOT NULL,
    last_record_id  uuid        NOT NULL,
    first_record_at timestamptz NOT NULL,
    last_record_at  timestamptz NOT NULL,
    hot_window_days integer     NOT NULL,
    archived_at     timestamptz NOT NULL,
    archived_by     text        NOT NULL
);

-- Addressability (D17): which archive holds record id X.
CREATE INDEX archive_ledger_record_range_idx ON archive_ledger (first_record_id, last_record_id);

-- +goose Down
DROP TABLE archive_ledger;
DROP TABLE rule_evaluations;
