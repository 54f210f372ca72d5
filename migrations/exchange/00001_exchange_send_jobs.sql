-- exchange_send_jobs: the exchange service's outbound delivery jobs.
-- Terminal rows ('sent', 'failed') are swept after
-- exchange_send_jobs_retention_days (default 30) by completed_at. Pending,
-- in-flight and dead-letter rows are never swept.

-- +goose Up
CREATE TABLE exchange_send_jobs (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    status       text        NOT NULL
        CONSTRAINT exchange_send_jobs_status_check
        CHECK (status IN ('pending', 'in_flight', 'sent', 'failed', 'dead_letter')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);

-- Sweep: terminal rows by completion time.
CREATE INDEX exchange_send_jobs_terminal_completed_idx
    ON exchange_send_jobs (completed_at)
    WHERE status IN ('sent', 'failed');

-- +goose Down
DROP TABLE exchange_send_jobs;
