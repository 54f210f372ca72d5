-- The detached-partition record (00005) also keeps the partition's lower
-- bound, so that a detached table the drop must not remove after all (a
-- row that must stay, or more rows than the cycle cap, written into it by
-- name after its detach; a DROP refused by a dependent object) is attached
-- again with its own bounds instead of staying detached, its rows out of
-- the service's sight. lower_bound NULL is MINVALUE; bound_known is false
-- for a record written before this migration (its lower bound was not
-- kept: such a table is left detached, reported, for an operator).

-- +goose Up
ALTER TABLE retention_detached_partitions
    ADD COLUMN lower_bound timestamptz,
    ADD COLUMN bound_known boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE retention_detached_partitions DROP COLUMN bound_known, DROP COLUMN lower_bound;
