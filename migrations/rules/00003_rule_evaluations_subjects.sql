-- rule_evaluations' subject (issue 26): the case an evaluation is about,
-- case:<input->>'case_id'> in its canonical spelling, or NULL. The archive
-- pass indexes each archive by it (archive_subjects, keyed hashes), and the
-- index below finds the hot rows of a case through the same expression
-- (rules' TableSpec declares exactly rule_evaluations_case(input)).
--
-- The index is built CONCURRENTLY (writers are never blocked); a run
-- interrupted half-way, which may leave an INVALID index, is finished by
-- running it again.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rule_evaluations_case(p_input jsonb)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT retention_subject('case', p_input ->> 'case_id')
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS rule_evaluations_case_idx;
CREATE INDEX CONCURRENTLY rule_evaluations_case_idx ON rule_evaluations (rule_evaluations_case(input));

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS rule_evaluations_case_idx;
DROP FUNCTION IF EXISTS rule_evaluations_case(jsonb);
