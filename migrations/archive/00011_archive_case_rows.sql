-- What each archive holds of each case (ADR-073): the facts a due date is
-- computed from without reading the objects. Per unpurged archive, per
-- case (its keyed hash, never the number in clear; the case itself sealed
-- under the subject key for the records officer's review): how many of
-- its rows are about the case and the UTC days of the oldest and newest.
-- Rows about no case are counted per UTC day under an empty hash: each
-- uses its own date. Written by the case-rows indexer, which reads each
-- archive once (verified against its ledger hash) and marks it.

-- +goose Up
CREATE TABLE archive_case_rows (
    archive_id   uuid   NOT NULL REFERENCES archive_ledger (archive_id),
    subject_hash bytea  NOT NULL,
    -- The case (its canonical spelling) sealed under the subject key; NULL
    -- for the rows about no case.
    subject_box  bytea,
    oldest_day   date   NOT NULL,
    newest_day   date   NOT NULL,
    rows         bigint NOT NULL CHECK (rows > 0),
    PRIMARY KEY (archive_id, subject_hash, newest_day),
    CHECK ((octet_length(subject_hash) = 0) = (subject_box IS NULL)),
    CHECK (oldest_day <= newest_day)
);
CREATE INDEX archive_case_rows_subject_idx ON archive_case_rows (subject_hash);

ALTER TABLE archive_ledger ADD COLUMN case_rows_indexed boolean NOT NULL DEFAULT false;
CREATE INDEX archive_ledger_case_rows_unindexed_idx ON archive_ledger (archive_id)
    WHERE NOT case_rows_indexed AND purged_at IS NULL;

-- +goose Down
DROP INDEX archive_ledger_case_rows_unindexed_idx;
ALTER TABLE archive_ledger DROP COLUMN case_rows_indexed;
DROP TABLE archive_case_rows;
