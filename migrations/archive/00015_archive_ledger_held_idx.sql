-- Two indexes of the ledger for an agency's size (ADR-076; about a million
-- rows after ten years of a dozen archived tables):
--
-- archive_ledger_held_idx: the archives legal_hold marks held. A hold
-- placed or released recomputes legal_hold from the holds (an index lookup
-- for each kind of hold) and from the rows marked held now, instead of
-- calling archive_is_held on every ledger row. Held archives are few.
--
-- archive_ledger_due_idx: the purge's candidates in the order it takes
-- them (oldest retention date first), so its scan reads the due archives
-- it lists, not the whole ledger.

-- +goose Up
CREATE INDEX IF NOT EXISTS archive_ledger_held_idx ON archive_ledger (archive_id) WHERE legal_hold;
CREATE INDEX IF NOT EXISTS archive_ledger_due_idx ON archive_ledger (retention_until, archived_at, archive_id)
    WHERE purged_at IS NULL AND NOT legal_hold AND retention_until IS NOT NULL;

-- +goose Down
DROP INDEX IF EXISTS archive_ledger_due_idx;
DROP INDEX IF EXISTS archive_ledger_held_idx;
