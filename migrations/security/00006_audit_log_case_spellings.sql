-- audit_log_case, second version: subject_id names a case when it starts
-- with "case" not followed by a letter, after any Unicode white space or
-- format character ('case 17', 'case_17', 'case17', 'case/17',
-- 'case- 17', as retention_subject's second version reads them); the
-- first version required 'case-' or 'case:'. A bare number still names no
-- kind. The index over it is rebuilt; the transport set's migration 00009
-- marked the archives unindexed.

-- +goose NO TRANSACTION

-- +goose Up
-- Both with a SQL-standard body (parsed at creation, still inlined):
-- pg_restore builds the indexes with an empty search_path, where a body
-- kept as text would not find retention_subject, so a pg_dump of the
-- database did not restore. dead_letter_audit_case's expression is
-- unchanged.
CREATE OR REPLACE FUNCTION dead_letter_audit_case(p_payload jsonb)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN retention_subject('case', p_payload ->> 'case_id');
CREATE OR REPLACE FUNCTION audit_log_case(p_subject_id text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN p_subject_id ~* '^[\s\u0085\u00a0\u00ad\u061c\u1680\u180e\u2000-\u200f\u2028\u2029\u202f\u205f-\u206f\u3000\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]*case([^a-z]|$)'
                THEN retention_subject('case', p_subject_id) END;
REINDEX INDEX CONCURRENTLY audit_log_case_idx;

-- +goose Down
SELECT 1;
