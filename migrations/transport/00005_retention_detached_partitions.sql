-- retention_detached_partitions: the partitions the kernel's retirement
-- detached for dropping and has not dropped yet (a drop that a crash or a
-- busy lock left undone is finished by the next call). The kernel drops
-- only a table recorded here, by the retirement that detached it: a table
-- in another schema, or one somebody else detached, is never touched
-- whatever its comment says. upper_bound is the detached partition's upper
-- bound: a recorded table is dropped only once that bound is at or before
-- the policy's cutoff.

-- +goose Up
CREATE TABLE retention_detached_partitions (
    table_oid   oid PRIMARY KEY,
    schema_name text NOT NULL,
    table_name  text NOT NULL,
    parent      text NOT NULL,
    upper_bound timestamptz NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE retention_detached_partitions;
