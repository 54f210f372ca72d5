-- The records schedule's approvals and the case events are journaled
-- (ADR-073, ADR-070): a database restored from a backup must not put an
-- older schedule version back in force, nor forget a case's reopening.

-- +goose Up
ALTER TABLE retention_journal DROP CONSTRAINT retention_journal_act_check;
ALTER TABLE retention_journal ADD CONSTRAINT retention_journal_act_check
    CHECK (act IN ('seal', 'unseal', 'hold_placed', 'hold_released', 'purge', 'expunge', 'schedule_approved', 'case_event'));

-- +goose Down
-- Entries of the new acts may exist: the constraint is not narrowed again.
SELECT 1;
