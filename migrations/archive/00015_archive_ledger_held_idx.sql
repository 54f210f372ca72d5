-- The archives legal_hold marks held, indexed (ADR-076): a hold placed or
-- released recomputes legal_hold from the holds (the index lookups of each
-- kind of hold) and the rows marked held now, instead of calling
-- archive_is_held on every ledger row. Held archives are few; an agency's
-- ledger holds about a million rows.

-- +goose Up
CREATE INDEX IF NOT EXISTS archive_ledger_held_idx ON archive_ledger (archive_id) WHERE legal_hold;

-- +goose Down
DROP INDEX IF EXISTS archive_ledger_held_idx;
