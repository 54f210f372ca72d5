-- What each archive holds of each case (ADR-073): the facts a due date is
-- computed from without reading the objects. Per unpurged archive, per
-- case (its keyed hash, never the number in clear; the case itself sealed
-- under the subject key for the records officer's review) and the other
-- subjects its rows are about: how many rows and the UTC days of the
-- oldest and newest. Rows about no case are counted per UTC day under an
-- empty hash: each uses its own date. Written by the case-rows indexer, which reads each
-- archive once (verified against its ledger hash) and marks it.

-- +goose Up
CREATE TABLE archive_cases (
    archive_id   uuid   NOT NULL REFERENCES archive_ledger (archive_id),
    subject_hash bytea  NOT NULL,
    -- The other subjects (cases and persons) of these rows: their keyed
    -- hashes (32 bytes each) concatenated in order, empty for none. A row
    -- about two cases is due when both are; a hold on either keeps it.
    others       bytea  NOT NULL,
    -- The case (its canonical spelling) sealed under the subject key; NULL
    -- for the rows about no case.
    subject_box  bytea,
    oldest_day   date   NOT NULL,
    newest_day   date   NOT NULL,
    rows         bigint NOT NULL CHECK (rows > 0),
    PRIMARY KEY (archive_id, subject_hash, others, newest_day),
    CHECK ((octet_length(subject_hash) = 0) = (subject_box IS NULL)),
    CHECK (octet_length(others) % 32 = 0),
    CHECK (oldest_day <= newest_day)
);
CREATE INDEX archive_cases_subject_idx ON archive_cases (subject_hash);

ALTER TABLE archive_ledger ADD COLUMN case_rows_indexed boolean NOT NULL DEFAULT false;
CREATE INDEX archive_ledger_case_rows_unindexed_idx ON archive_ledger (archive_id)
    WHERE NOT case_rows_indexed AND purged_at IS NULL;

-- An expungement replaces the case's keyed hash by its order's commitment
-- wherever it is kept: in the accepted case events too, which are
-- otherwise insert-only. The bypass is the expungement's own
-- (craig.expunge_id, set for its transaction only, migrations/transport
-- 00007), and it changes the hashes only.
-- +goose StatementBegin
CREATE FUNCTION case_clock_events_hash_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('craig.expunge_id', true), '') <> ''
       AND (NEW.id, NEW.type, NEW.at, NEW.classification, NEW.source, NEW.recorded_at)
           IS NOT DISTINCT FROM (OLD.id, OLD.type, OLD.at, OLD.classification, OLD.source, OLD.recorded_at) THEN
        RAISE LOG 'case_clock_events: a hash replaced by expungement %', current_setting('craig.expunge_id', true);
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'table case_clock_events is insert-only: a case clock is moved by a new event' USING ERRCODE = 'feature_not_supported';
END $$;
-- +goose StatementEnd
DROP TRIGGER case_clock_events_insert_only ON case_clock_events;
CREATE TRIGGER case_clock_events_insert_only
    BEFORE UPDATE ON case_clock_events
    FOR EACH ROW EXECUTE FUNCTION case_clock_events_hash_only();
CREATE TRIGGER case_clock_events_no_delete
    BEFORE DELETE OR TRUNCATE ON case_clock_events
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();
CREATE INDEX case_clock_events_merged_idx ON case_clock_events (merged_into) WHERE merged_into IS NOT NULL;
CREATE INDEX case_clocks_merged_idx ON case_clocks (merged_into) WHERE merged_into IS NOT NULL;

-- retention_add_period is the day a period after a day ends (ADR-073):
-- the months first, then the days. A month's day the target month lacks
-- (Jan 31 + P1M, Feb 29 + P1Y) is the first day after that month's end,
-- never its last day: a period is never shorter than written.
CREATE FUNCTION retention_add_period(day date, months integer, days integer) RETURNS date
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (CASE WHEN extract(day FROM day + make_interval(months => months)) < extract(day FROM day)
                 THEN (day + make_interval(months => months))::date + 1
                 ELSE (day + make_interval(months => months))::date END) + days;

-- retention_hashes splits concatenated keyed hashes (archive_cases.others)
-- into an array.
CREATE FUNCTION retention_hashes(hashes bytea) RETURNS bytea[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN ARRAY(SELECT substring(hashes FROM i * 32 + 1 FOR 32) FROM generate_series(0, octet_length(hashes) / 32 - 1) AS i ORDER BY i);

-- +goose Down
DROP FUNCTION retention_hashes(bytea);
DROP FUNCTION retention_add_period(date, integer, integer);
DROP INDEX case_clocks_merged_idx;
DROP INDEX case_clock_events_merged_idx;
DROP TRIGGER case_clock_events_no_delete ON case_clock_events;
DROP TRIGGER case_clock_events_insert_only ON case_clock_events;
CREATE TRIGGER case_clock_events_insert_only
    BEFORE UPDATE ON case_clock_events
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();
DROP FUNCTION case_clock_events_hash_only();
DROP INDEX archive_ledger_case_rows_unindexed_idx;
ALTER TABLE archive_ledger DROP COLUMN case_rows_indexed;
DROP TABLE archive_cases;
