-- Archive-then-prune checks the kernel runs for every archived table.

-- InsertOnlyTriggers lists, of the given tables, those that exist and have
-- an enabled BEFORE UPDATE trigger calling retention_refuse_update() (seed
-- D18: archived tables are insert-only, enforced by the database).
-- tgtype bits: 2 = BEFORE, 16 = UPDATE.
-- name: InsertOnlyTriggers :many
SELECT c.relname::text AS table_name
FROM pg_catalog.pg_trigger AS t
JOIN pg_catalog.pg_class AS c ON c.oid = t.tgrelid
JOIN pg_catalog.pg_proc AS p ON p.oid = t.tgfoid
WHERE c.oid = ANY (
        SELECT to_regclass(n)::oid FROM unnest(sqlc.arg(table_names)::text[]) AS n)
  AND p.proname = 'retention_refuse_update'
  AND t.tgenabled <> 'D'
  AND (t.tgtype::int & 2) <> 0
  AND (t.tgtype::int & 16) <> 0;
