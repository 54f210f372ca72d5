-- subsidy_reconcile_queue: the financial service's reconciliation work queue.
-- Processed rows are swept after subsidy_reconcile_queue_retention_days
-- (default 30) by processed_at. Unprocessed and dead-lettered rows are never
-- swept.

-- +goose Up
CREATE TABLE subsidy_reconcile_queue (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    processed_at     timestamptz,
    dead_lettered_at timestamptz
);

-- Sweep: processed, never-dead-lettered rows by processing time.
CREATE INDEX subsidy_reconcile_queue_processed_idx
    ON subsidy_reconcile_queue (processed_at)
    WHERE processed_at IS NOT NULL AND dead_lettered_at IS NULL;

-- +goose Down
DROP TABLE subsidy_reconcile_queue;
