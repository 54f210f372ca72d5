-- Transport tables: the transactional outbox and the inbox dedup table.
-- Applied to EVERY service database under the goose version table
-- goose_transport_version.
--
-- Retention (ADR-058, docs/adr/0058-retention-classes.md): these are delivery
-- and dedup artifacts, not records of the system of truth. Published outbox
-- rows are swept after event_outbox_retention_days (default 30); pending rows
-- are NEVER swept (they are the only evidence of an undelivered event). Inbox
-- rows are swept after event_inbox_retention_days (default 31), which must
-- outlive the outbox window by at least a day (seed 000, section D3.1).

-- +goose Up
CREATE TABLE event_outbox (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    event_type   text        NOT NULL,
    payload      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    last_error   text
);

-- Drain: pending rows, oldest first.
CREATE INDEX event_outbox_pending_idx
    ON event_outbox (created_at)
    WHERE published_at IS NULL;

-- Sweep: published rows by age, so a cycle is O(eligible rows) instead of a
-- sequential scan of the whole table.
CREATE INDEX event_outbox_published_created_idx
    ON event_outbox (created_at)
    WHERE published_at IS NOT NULL;

CREATE TABLE event_inbox (
    event_id    uuid        PRIMARY KEY,
    event_type  text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- Sweep: inbox rows by age.
CREATE INDEX event_inbox_received_idx ON event_inbox (received_at);

-- +goose Down
DROP TABLE event_inbox;
DROP TABLE event_outbox;
