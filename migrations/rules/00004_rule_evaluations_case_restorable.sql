-- rule_evaluations_case with a SQL-standard body: pg_restore builds the
-- index over it with an empty search_path, and a body kept as text then
-- cannot find retention_subject, so a pg_dump of the database did not
-- restore (ADR-070: a restore must be possible to be reconciled). A
-- SQL-standard body is parsed once, when the function is created, and
-- still inlined. The same expression: the index stays valid.

-- +goose Up
CREATE OR REPLACE FUNCTION rule_evaluations_case(p_input jsonb)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN retention_subject('case', p_input ->> 'case_id');

-- +goose Down
SELECT 1;
