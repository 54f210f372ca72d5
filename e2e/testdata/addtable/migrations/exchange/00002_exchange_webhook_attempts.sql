-- exchange_webhook_attempts: one row per outbound webhook delivery attempt.
-- Finished attempts ('delivered', 'abandoned') are swept after
-- exchange_webhook_attempts_retention_days by finished_at; pending attempts
-- are never swept.

-- +goose Up
CREATE TABLE exchange_webhook_attempts (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    status      text        NOT NULL
        CONSTRAINT exchange_webhook_attempts_status_check
        CHECK (status IN ('pending', 'delivered', 'abandoned')),
    finished_at timestamptz
);

-- Sweep: finished attempts by finish time.
CREATE INDEX exchange_webhook_attempts_finished_idx
    ON exchange_webhook_attempts (finished_at)
    WHERE status IN ('delivered', 'abandoned');

-- +goose Down
DROP TABLE exchange_webhook_attempts;
