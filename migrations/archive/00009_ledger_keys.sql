-- The ledger's object keys, indexed: the intent sweep never destroys an
-- object an unpurged ledger row names (an intent a restore brought back
-- after its booking was forgotten and re-applied), and it looks them up
-- per intent (ADR-069, ADR-070).

-- +goose Up
CREATE INDEX archive_ledger_data_key_idx ON archive_ledger (data_key);
CREATE INDEX archive_ledger_manifest_key_idx ON archive_ledger (manifest_key);

-- +goose Down
DROP INDEX archive_ledger_manifest_key_idx;
DROP INDEX archive_ledger_data_key_idx;
