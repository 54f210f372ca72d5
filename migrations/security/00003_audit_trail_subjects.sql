-- The audit trail's subjects (issue 26): audit_log is about case:<n> when
-- its subject_id is case-<n> or case:<n> (any letter case, the spellings
-- retention_subject accepts; a bare number names no kind, so no subject); dead_letter_audit about
-- case:<payload->>'case_id'>; canonical spellings or NULL. The archive pass
-- indexes each archive by them (archive_subjects, keyed hashes) and these
-- indexes find the hot rows of a case through the same expressions
-- (security's TableSpecs declare exactly these calls).
--
-- Built CONCURRENTLY (writers are never blocked); an interrupted run is
-- finished by running it again.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION audit_log_case(p_subject_id text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN btrim(p_subject_id, E' \t\n\r\f\v\u00a0') ~* '^case[-:]'
                THEN retention_subject('case', p_subject_id) END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dead_letter_audit_case(p_payload jsonb)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT retention_subject('case', p_payload ->> 'case_id')
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS audit_log_case_idx;
CREATE INDEX CONCURRENTLY audit_log_case_idx ON audit_log (audit_log_case(subject_id));
DROP INDEX CONCURRENTLY IF EXISTS dead_letter_audit_case_idx;
CREATE INDEX CONCURRENTLY dead_letter_audit_case_idx ON dead_letter_audit (dead_letter_audit_case(payload));

-- The fleet ledger shows, per archive, whether a subject hold covers it
-- (from the producers' hold events).
ALTER TABLE archive_records ADD COLUMN IF NOT EXISTS subject_hold boolean NOT NULL DEFAULT false;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS audit_log_case_idx;
DROP INDEX CONCURRENTLY IF EXISTS dead_letter_audit_case_idx;
DROP FUNCTION IF EXISTS audit_log_case(text);
DROP FUNCTION IF EXISTS dead_letter_audit_case(jsonb);
-- archive_records.subject_hold is fleet bookkeeping: never dropped.
