-- audit_log's second subject (issue 40, ADR-066): the audit row of a
-- delivered event keeps the event's payload (detail.payload), and a
-- payload's case_id makes the row the case's, as dead_letter_audit's
-- payload->>'case_id' makes the dead-lettered copy of the same event the
-- case's. security's AuditLog TableSpec declares both expressions, so such
-- a row is indexed, fetched, held, sealed and expunged under the case (the
-- changed declaration marks audit_log's archives unindexed: the backfill
-- reads them again).
--
-- Built CONCURRENTLY (writers are never blocked); an interrupted run is
-- finished by running it again.

-- +goose NO TRANSACTION

-- +goose Up
-- A SQL-standard body (parsed at creation, still inlined): pg_restore
-- builds the index with an empty search_path, where a body kept as text
-- would not find retention_subject.
CREATE OR REPLACE FUNCTION audit_log_payload_case(p_detail jsonb)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN retention_subject('case', p_detail -> 'payload' ->> 'case_id');
DROP INDEX CONCURRENTLY IF EXISTS audit_log_payload_case_idx;
CREATE INDEX CONCURRENTLY audit_log_payload_case_idx ON audit_log (audit_log_payload_case(detail));

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS audit_log_payload_case_idx;
DROP FUNCTION IF EXISTS audit_log_payload_case(jsonb);
