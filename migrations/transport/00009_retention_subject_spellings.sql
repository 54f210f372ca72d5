-- retention_subject, second version (ADR-066): more spellings of one
-- number are that number. Around the value, every Unicode white space and
-- format character is trimmed (the first version trimmed ASCII white space
-- and U+00A0 only, so an em space, a narrow no-break space, a figure
-- space, an ideographic space or a byte-order mark around the digits made
-- the row no subject's); between the kind and the number any one of
-- '-', ':', '_', '/' or nothing, with spaces around it ('case 17',
-- 'case_17', 'case17', 'case/17', 'case- 17'); before the digits a '+' or
-- a '#'. Still NULL for anything else ('17-18', '1 7', 'case--17',
-- 'casey17', '[17]'), and NULL for a value holding a bidirectional
-- embedding or override (U+202A..U+202E): U+202E '71' is displayed as 17,
-- and stripping the override would make it case 71, another case than the
-- one a person reads. Total, IMMUTABLE and one expression, as before.
--
-- Trimmed: Unicode's white space and format characters around the value
-- (U+0009..U+000D, U+0020, U+0085, U+00A0, U+00AD, U+061C, U+1680,
-- U+180E, U+2000..U+200F, U+2028..U+2029, U+202F, U+205F..U+206F, U+3000,
-- U+FEFF, U+FFF9..U+FFFB, the tags U+E0001 and U+E0020..U+E007F).
--
-- The expression indexes over it (the services' subject functions) are
-- rebuilt, and every unpurged archive is marked unindexed (its index was
-- computed with the first version): a subject hold covers them until
-- `<service> archive index-subjects` has read them again, and an
-- expungement waits for it (409 subjects_not_indexed).

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION retention_subject(p_kind text, p_value text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN p_value !~ '[\u202a-\u202e]' THEN p_kind || ':' || (regexp_match(p_value,
        '^[\s\u0085\u00a0\u00ad\u061c\u1680\u180e\u2000-\u200f\u2028\u2029\u202f\u205f-\u206f\u3000\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]*'
        || '(?:' || p_kind || '[\s\u00a0\u2000-\u200b\u202f\u3000]*[-:_/]?[\s\u00a0\u2000-\u200b\u202f\u3000]*)?'
        || '[+#]?0*([1-9][0-9]{0,29}|0)(?:\.0+)?'
        || '[\s\u0085\u00a0\u00ad\u061c\u1680\u180e\u2000-\u200f\u2028\u2029\u202f\u205f-\u206f\u3000\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f]*$', 'i'))[1] END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE i regclass;
BEGIN
    -- Plain indexes only: a partitioned one cannot be rebuilt in a
    -- transaction, and its partitions' own indexes are plain ones.
    FOR i IN SELECT x.indexrelid::regclass FROM pg_index AS x JOIN pg_class AS c ON c.oid = x.indrelid
             JOIN pg_class AS ci ON ci.oid = x.indexrelid JOIN pg_namespace AS n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND x.indexprs IS NOT NULL AND ci.relkind = 'i'
    LOOP
        EXECUTE format('REINDEX INDEX %s', i);
    END LOOP;
    IF to_regclass('archive_ledger') IS NOT NULL THEN
        UPDATE archive_ledger SET subjects_indexed = false WHERE subjects_indexed AND purged_at IS NULL;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- The first version's spellings are a subset: nothing to undo.
SELECT 1;
