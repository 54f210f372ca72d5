-- The subject index (issue 26, ADR-066): which archives hold rows about a
-- subject (a case, a person), written in the transaction that books the
-- archive (no archive without its index, no index without its archive).
-- It stores the subject's keyed hash (HMAC-SHA256 under the service's
-- archive.subject_key_file), never the subject in clear: the index does not
-- list case numbers to whoever reads the database.
--
-- subjects_indexed is true once an archive's subjects are in the index (at
-- booking, or by the backfill for archives booked before the index existed
-- or while no key was configured). An archive not yet indexed might hold
-- any subject: while a subject hold is active, it is held.
--
-- A hold may name subjects (subject_hashes): it covers every archive the
-- index says holds one of them, now and booked later.

-- +goose Up
-- One row per archive, its subjects' hashes in one array with a GIN index:
-- a booking writes one row (not one per subject: an archive of 1,000 rows
-- may hold 1,000 cases), and "which archives hold hash H" is one index
-- lookup (subject_hashes @> ARRAY[H]).
CREATE TABLE archive_subjects (
    archive_id     uuid    PRIMARY KEY REFERENCES archive_ledger (archive_id),
    subject_hashes bytea[] NOT NULL
);
CREATE INDEX archive_subjects_hashes_idx ON archive_subjects USING gin (subject_hashes);

-- The key the index is built with, as a fingerprint (an HMAC of a fixed
-- text under it, never the key): a service started with another key would
-- look up hashes the index does not hold, and its subject holds would
-- cover nothing. The first service to use a key binds it; any other key
-- is refused at boot.
CREATE TABLE archive_subject_key (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    fingerprint bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    bound_at    timestamptz NOT NULL DEFAULT now()
);

-- The subjects each archived table declared when its archives were
-- indexed (its TableSpec's kinds and expressions): when a table's
-- declaration changes (a subject added to a table archived before), its
-- archives are marked unindexed again, so the backfill re-reads them and a
-- subject hold is refused until it has, instead of covering none of them.
CREATE TABLE archive_subject_declarations (
    table_name  text        PRIMARY KEY,
    declaration text        NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE archive_ledger ADD COLUMN subjects_indexed boolean NOT NULL DEFAULT false;
CREATE INDEX archive_ledger_unindexed_idx ON archive_ledger (archive_id) WHERE NOT subjects_indexed;

ALTER TABLE archive_holds ADD COLUMN subject_hashes bytea[] NOT NULL DEFAULT '{}';

-- A hold names archive ids, a table, or subjects: the check of 00002 that
-- required ids or a table is replaced (found by its definition: it was
-- created unnamed).
-- +goose StatementBegin
DO $$
DECLARE c text;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'archive_holds'::regclass AND contype = 'c'
               AND pg_get_constraintdef(oid) LIKE '%cardinality(archive_ids) > 0%'
    LOOP
        EXECUTE format('ALTER TABLE archive_holds DROP CONSTRAINT %I', c);
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE archive_holds ADD CONSTRAINT archive_holds_names_what_it_holds
    CHECK (cardinality(archive_ids) > 0 OR table_name IS NOT NULL OR cardinality(subject_hashes) > 0);
CREATE INDEX archive_holds_subjects_idx ON archive_holds USING gin (subject_hashes) WHERE released_at IS NULL;

-- archive_is_held gains the subject holds: an active hold covers an archive
-- the index says holds one of its subjects, or one not yet indexed.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION archive_is_held(p_archive_id uuid, p_table text, p_first timestamptz, p_last timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM archive_holds AS h
        WHERE h.released_at IS NULL
          AND (p_archive_id = ANY (h.archive_ids)
               OR (h.table_name = p_table
                   AND (h.from_at IS NULL OR p_last >= h.from_at)
                   AND (h.to_at IS NULL OR p_first < h.to_at))
               OR (cardinality(h.subject_hashes) > 0
                   AND (EXISTS (SELECT 1 FROM archive_subjects AS s
                                WHERE s.archive_id = p_archive_id AND s.subject_hashes && h.subject_hashes)
                        OR NOT EXISTS (SELECT 1 FROM archive_ledger AS l
                                       WHERE l.archive_id = p_archive_id AND l.subjects_indexed)))))
$$;
-- +goose StatementEnd

-- +goose Down
-- The index and the holds are records: never dropped by a down migration.
SELECT 1;
