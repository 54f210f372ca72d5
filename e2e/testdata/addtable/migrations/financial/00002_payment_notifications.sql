-- payment_notifications: one row per payment notification to a provider.
-- A sent notification is swept payment_notifications_retention_days after it
-- was sent, a failed one after it was created; a pending one is never swept
-- (its age is its creation). The age depends on the state, so it is a
-- stored generated column, indexed.

-- +goose Up
CREATE TABLE payment_notifications (
    id           uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    status       text        NOT NULL
        CONSTRAINT payment_notifications_status_check CHECK (status IN ('pending', 'sent', 'failed')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    swept_at     timestamptz GENERATED ALWAYS AS (
        CASE WHEN status = 'sent' THEN completed_at ELSE created_at END) STORED
);

-- Sweep: sent and failed notifications by their age.
CREATE INDEX payment_notifications_swept_idx ON payment_notifications (swept_at)
    WHERE status IN ('sent', 'failed');

-- +goose Down
DROP TABLE payment_notifications;
