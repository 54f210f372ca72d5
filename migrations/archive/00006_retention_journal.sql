-- The journal of destructive and protective acts (ADR-070): every seal,
-- unseal, hold placed or released, purged archive and executed
-- expungement is a row here, written in the act's own transaction, and a
-- create-only object retention-archives/<service>/journal/<seq>.json in
-- the store, written before the act reports success. A database restored
-- from a backup forgets the acts after it; the store does not. When the
-- store holds a sequence number the database lacks, the service refuses
-- destructive work and reads until `<service> reconcile` has re-applied
-- each missing act from the store and adopted its row here.
--
-- The journal never holds a case number in clear: subjects are keyed
-- hashes, or sealed under the subject key (an expungement's subject);
-- free text a person typed (a hold's title and reason) is sealed too.

-- +goose Up
CREATE TABLE retention_journal (
    seq       bigint      PRIMARY KEY CHECK (seq > 0),
    act       text        NOT NULL CHECK (act IN ('seal', 'unseal', 'hold_placed', 'hold_released', 'purge', 'expunge')),
    detail    jsonb       NOT NULL,
    actor     text        NOT NULL,
    at        timestamptz NOT NULL,
    -- When its store object was written; NULL until then (the next act,
    -- verify or boot writes it).
    stored_at timestamptz
);
CREATE INDEX retention_journal_unstored_idx ON retention_journal (seq) WHERE stored_at IS NULL;

-- +goose Down
-- The journal is a record: never dropped by a down migration.
SELECT 1;
