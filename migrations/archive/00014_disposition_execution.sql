-- A disposition batch's execution (ADR-073). An archive a batch rewrites is
-- stamped like one an expungement rewrites: archive_ledger.expunge_id names
-- the act that superseded it (the court order or the disposition batch; the
-- dispositions table tells them apart), so every read follows it to its
-- successor. Its successor's objects are known before they are written
-- (upload intents of work 'disposition'). Each case of a batch records what
-- its execution did: destroyed (with its rows) or skipped (why: not due at
-- that moment, held). An execution is journaled (act 'disposition'): a
-- database restored from a backup taken before it destroys its rows again
-- at `reconcile`.

-- +goose Up
ALTER TABLE retention_journal DROP CONSTRAINT retention_journal_act_check;
ALTER TABLE retention_journal ADD CONSTRAINT retention_journal_act_check
    CHECK (act IN ('seal', 'unseal', 'hold_placed', 'hold_released', 'purge', 'expunge', 'schedule_approved', 'case_event',
                   'disposition', 'disposition_rejected'));

ALTER TABLE archive_upload_intents DROP CONSTRAINT archive_upload_intents_work_check;
ALTER TABLE archive_upload_intents ADD CONSTRAINT archive_upload_intents_work_check
    CHECK (work IN ('archive', 'expungement', 'disposition'));

ALTER TABLE dispositions
    ADD COLUMN rows_destroyed bigint CHECK (rows_destroyed >= 0),
    ADD COLUMN archives_rewritten integer CHECK (archives_rewritten >= 0),
    ADD COLUMN archives_purged integer CHECK (archives_purged >= 0),
    ADD CONSTRAINT dispositions_approver_check CHECK ((approved_by IS NULL) = (approved_at IS NULL)),
    ADD CONSTRAINT dispositions_executed_check CHECK ((status = 'executed') = (executed_at IS NOT NULL AND certificate_key IS NOT NULL));

ALTER TABLE disposition_cases
    -- destroyed: every row of it the batch found due; partial: some, then
    -- it stopped being due (a reopening, a hold, a new record); skipped:
    -- none.
    ADD COLUMN outcome text CHECK (outcome IN ('destroyed', 'partial', 'skipped')),
    ADD COLUMN outcome_reason text,
    ADD COLUMN rows_destroyed bigint NOT NULL DEFAULT 0 CHECK (rows_destroyed >= 0);

-- +goose Down
-- Executions are records: never dropped by a down migration.
SELECT 1;
