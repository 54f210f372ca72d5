-- Disposition batches (ADR-073): what a records officer freezes from the
-- due listing for a second identity's review. A batch names its cases by
-- their keyed hash (the case itself sealed under the subject key, for the
-- reviewers), with the item, its authority, the due date and the rows and
-- archives the listing counted. A rejected batch's extension keeps its
-- cases until a date (a hearing, an audit): the due listing honours it.

-- +goose Up
CREATE TABLE dispositions (
    disposition_id   uuid        PRIMARY KEY,
    status           text        NOT NULL CHECK (status IN ('proposed', 'executing', 'executed', 'rejected')),
    schedule_version text        NOT NULL REFERENCES retention_schedules (version),
    as_of            date        NOT NULL,
    row_limit        bigint      NOT NULL CHECK (row_limit > 0),
    rows             bigint      NOT NULL CHECK (rows >= 0),
    proposed_by      text        NOT NULL,
    proposed_at      timestamptz NOT NULL DEFAULT now(),
    approved_by      text,
    approved_at      timestamptz,
    executed_at      timestamptz,
    certificate_key  text,
    rejected_by      text,
    rejected_at      timestamptz,
    reject_reason    text,
    extend_until     date,
    CHECK ((status = 'rejected') = (rejected_at IS NOT NULL)),
    CHECK ((rejected_at IS NULL) = (rejected_by IS NULL) AND (rejected_at IS NULL) = (reject_reason IS NULL)),
    CHECK (extend_until IS NULL OR rejected_at IS NOT NULL)
);
CREATE INDEX dispositions_open_idx ON dispositions (disposition_id) WHERE status IN ('proposed', 'executing');

CREATE TABLE disposition_cases (
    disposition_id uuid    NOT NULL REFERENCES dispositions (disposition_id),
    ord            integer NOT NULL,
    series         text    NOT NULL,
    -- The case's keyed hash; empty for rows about no case of one day.
    subject_hash   bytea   NOT NULL,
    subject_box    bytea,
    day            date,
    item_id        text    NOT NULL,
    authority      text    NOT NULL,
    due            date    NOT NULL,
    rows_hot       bigint  NOT NULL CHECK (rows_hot >= 0),
    rows_archived  bigint  NOT NULL CHECK (rows_archived >= 0),
    archives       uuid[]  NOT NULL,
    PRIMARY KEY (disposition_id, ord),
    CHECK ((octet_length(subject_hash) = 0) = (day IS NOT NULL))
);
CREATE INDEX disposition_cases_subject_idx ON disposition_cases (series, subject_hash);

CREATE TABLE disposition_extensions (
    id             uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    disposition_id uuid        NOT NULL REFERENCES dispositions (disposition_id),
    series         text        NOT NULL,
    subject_hash   bytea       NOT NULL,
    day            date,
    until          date        NOT NULL,
    reason         text        NOT NULL,
    extended_by    text        NOT NULL,
    extended_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX disposition_extensions_subject_idx ON disposition_extensions (series, subject_hash);

-- +goose Down
DROP TABLE disposition_extensions;
DROP TABLE disposition_cases;
DROP TABLE dispositions;
