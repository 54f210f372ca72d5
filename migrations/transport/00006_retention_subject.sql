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
-- INSERT of the row that made it raise), and IMMUTABLE so it may be indexed.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION retention_subject(p_kind text, p_value text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT p_kind || ':' || COALESCE(NULLIF(ltrim(x.m[1], '0'), ''), '0')
    FROM (SELECT regexp_match(btrim(p_value, E' \t\n\r\f\v\u00a0'),
                              '^(?:' || p_kind || '[-:])?0*([0-9]{1,30})(?:\.0+)?$', 'i') AS m) AS x
    WHERE x.m IS NOT NULL
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION retention_subject(text, text);
