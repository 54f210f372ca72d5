-- Court orders (issue 27, ADR-067): sealing a subject (an access state) and
-- expunging one (its rows removed from the hot tables and from every
-- archive that holds them, each such archive rewritten without them as a
-- new create-only object that names what it supersedes).
--
-- Nothing here holds a subject in clear. A seal and a pending expungement
-- name the subject by its keyed hash (the subject index's HMAC); a pending
-- expungement also keeps the subject and the order's salt sealed under the
-- service's subject key (AES-GCM with a key derived from it), needed to
-- find the hot rows and to resume after a crash, and erased when it
-- completes. An executed expungement keeps only the salted commitment.

-- +goose Up
-- The subjects sealed now (one row each; unsealing deletes it: the seal and
-- the unseal are in archive_lifecycle_log).
CREATE TABLE subject_seals (
    subject_hash bytea       PRIMARY KEY CHECK (octet_length(subject_hash) = 32),
    order_ref    text        NOT NULL CHECK (btrim(order_ref) <> ''),
    reason       text        NOT NULL CHECK (btrim(reason) <> ''),
    sealed_by    text        NOT NULL,
    sealed_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE expungements (
    expunge_id      uuid        PRIMARY KEY,
    status          text        NOT NULL CHECK (status IN ('awaiting_approval', 'executing', 'executed')),
    -- The subject's keyed hash while the order is not executed; NULL after.
    subject_hash    bytea       CHECK (octet_length(subject_hash) = 32),
    -- The subject and the salt, sealed under the subject key; NULL after.
    subject_box     bytea,
    salt_box        bytea,
    -- sha256(domain || salt || subject): set when execution starts.
    commitment      bytea       CHECK (octet_length(commitment) = 32),
    order_ref       text        NOT NULL CHECK (btrim(order_ref) <> ''),
    reason          text        NOT NULL CHECK (btrim(reason) <> ''),
    -- Holds the order names: they do not block it (any other does).
    holds           uuid[]      NOT NULL DEFAULT '{}',
    -- The archives that held the subject when the order was requested.
    archives        uuid[]      NOT NULL,
    requested_by    text        NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    approved_by     text,
    executed_at     timestamptz,
    rewritten       integer,
    rows_removed    bigint,
    hot_rows_removed bigint     NOT NULL DEFAULT 0,
    certificate_key text,
    CHECK (approved_by IS NULL OR approved_by <> requested_by),
    CHECK (status <> 'executed' OR (subject_hash IS NULL AND subject_box IS NULL AND salt_box IS NULL AND commitment IS NOT NULL))
);

-- Lineage: an archive rewritten by an expungement is stamped purged (its
-- objects are destroyed) with the expungement and its successor (NULL when
-- every row was the subject's); the successor names what it supersedes.
ALTER TABLE archive_ledger
    ADD COLUMN expunge_id    uuid,
    ADD COLUMN superseded_by uuid,
    ADD COLUMN supersedes    uuid;
CREATE UNIQUE INDEX archive_ledger_supersedes_idx ON archive_ledger (supersedes) WHERE supersedes IS NOT NULL;

-- +goose Down
-- Orders and lineage are records: never dropped by a down migration.
SELECT 1;
