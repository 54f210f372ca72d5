-- Upload intents (ADR-069): every object an archive pass or a court order
-- writes is first recorded here, in a transaction committed before the
-- PUT, and the transaction that books the object deletes its intent. So an
-- object no ledger row names (its booking never committed: a SIGKILL, a
-- cancelled request, a database timeout) is never unknown: its intent
-- names its key, and the next holder of the archive lease destroys every
-- version of it (its rows are still hot, or booked in another archive:
-- nothing is lost), again until no late PUT can land, and then deletes
-- the intent.
--
-- The row itself is the arbiter between a booking and a sweep: a booking
-- deletes its intents and fails unless it deleted them all; a sweep locks
-- an intent (FOR UPDATE SKIP LOCKED) for as long as it destroys the
-- object and deletes it in the same transaction. A booking that commits
-- first leaves nothing to sweep; a sweep that commits first makes the
-- booking roll back (its objects are gone); neither can happen half.

-- +goose Up
CREATE TABLE archive_upload_intents (
    object_key  text        PRIMARY KEY CHECK (object_key LIKE 'retention-archives/%'),
    -- What wrote it: an archive pass ('archive', work_id = the archive id)
    -- or an expungement's rewrite ('expungement', work_id = the order).
    work        text        NOT NULL CHECK (work IN ('archive', 'expungement')),
    work_id     uuid        NOT NULL,
    -- The table whose rows the object holds.
    table_name  text        NOT NULL,
    recorded_by text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    -- When a sweep first destroyed the object. The intent stays, and every
    -- sweep destroys the key again, for the late-upload window (a PUT a
    -- dying client sent can still land after the destroy: the store takes
    -- a signed request for 15 minutes); after it the intent is deleted.
    -- A destroyed intent is never booked.
    destroyed_at timestamptz
);
CREATE INDEX archive_upload_intents_table_idx ON archive_upload_intents (table_name);

-- +goose Down
-- An intent names an object that may hold records: never dropped.
SELECT 1;
