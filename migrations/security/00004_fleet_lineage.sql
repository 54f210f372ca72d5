-- The fleet ledger records the lineage of archives an expungement rewrote
-- (issue 27, ADR-067): <service>.archive_superseded stamps each old
-- archive's fleet row purged by the order's approver, with the order and
-- its successor (NULL when every row was the expunged subject's); the
-- successor is booked by its own archive event like any new archive.

-- +goose Up
ALTER TABLE archive_records
    ADD COLUMN superseded_by uuid,
    ADD COLUMN expunge_id    uuid;

-- +goose Down
-- The fleet ledger's lineage is a record: never dropped by a down migration.
SELECT 1;
