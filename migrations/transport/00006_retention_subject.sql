-- retention_subject: the canonical spelling of a subject (issue 26,
-- kernel/subject): <kind>:<digits> without leading zeros, or NULL when the
-- value is not a whole number of 1 to 30 significant ASCII digits. Every
-- spelling a table may hold for one number is that number: surrounding
-- white space (a tab, a newline, a no-break space), a <kind>- or <kind>:
-- prefix in any letter case, leading zeros, and a zero fraction (a JSON
-- number 17.0 renders as "17.0"). Every table's subject function
-- (migrations/<service>) builds its subjects with it, so 17, "017",
-- "case-17", " 17 " and 17.0 are case:17 alike. It is total: it never
-- raises (an expression index over a function that raises would refuse the
-- INSERT of the row that made it raise), IMMUTABLE so it may be indexed,
-- and one expression, so the planner inlines it (a SQL function called
-- per row cost the archive pass 45% of its speed: bench, issue 26).

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION retention_subject(p_kind text, p_value text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT p_kind || ':' || (regexp_match(btrim(p_value, E' \t\n\r\f\v\u00a0'),
                                          '^(?:' || p_kind || '[-:])?0*([1-9][0-9]{0,29}|0)(?:\.0+)?$', 'i'))[1]
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION retention_subject(text, text);
