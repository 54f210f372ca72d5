-- retention_subject: the canonical spelling of a subject (issue 26,
-- kernel/subject): <kind>:<digits> without leading zeros, or NULL when the
-- value is not 1 to 30 ASCII digits, optionally after <kind>- or <kind>:
-- (any letter case) and surrounding spaces. Every table's subject function
-- (migrations/<service>) builds its subjects with it, so a table that stores
-- 17, "17" or "017" yields case:17 alike. It is total: it never raises (an
-- expression index over a function that raises would refuse the INSERT of
-- the row that made it raise), and IMMUTABLE so it may be indexed.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION retention_subject(p_kind text, p_value text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT p_kind || ':' || COALESCE(NULLIF(ltrim(x.m[1], '0'), ''), '0')
    FROM (SELECT regexp_match(btrim(p_value), '^(?:' || p_kind || '[-:])?([0-9]{1,30})$', 'i') AS m) AS x
    WHERE x.m IS NOT NULL
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION retention_subject(text, text);
