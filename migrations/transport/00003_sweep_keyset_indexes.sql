-- sweep keyset indexes: the outbox and inbox sweep indexes gain the primary
-- key as a second column, (created_at, id) and (received_at, event_id), so
-- every row has a unique sweep key. The sweeps then delete key RANGES through
-- the index in key order, continuing from the last key of the previous batch
-- (queries/kernel/sweep.sql): each batch reads its own rows once, instead of
-- selecting ctids (a first heap visit) and deleting by ctid (a second one)
-- after walking the index entries of every batch before it. A backlog drains
-- at close to the speed of one unbounded DELETE (bench/, issue 5).
--
-- The indexes keep their names (the probe, the tests and the runbooks name
-- them) and are rebuilt CONCURRENTLY, so writers are never blocked: each new
-- index is built under a temporary name, the old one dropped, the new one
-- renamed. Every step is idempotent: a run interrupted half-way (which may
-- leave an INVALID temporary index) is finished by running it again.

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS event_outbox_published_created_key_idx;
CREATE INDEX CONCURRENTLY event_outbox_published_created_key_idx
    ON event_outbox (created_at, id)
    WHERE published_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS event_outbox_published_created_idx;
ALTER INDEX event_outbox_published_created_key_idx RENAME TO event_outbox_published_created_idx;

DROP INDEX CONCURRENTLY IF EXISTS event_inbox_received_key_idx;
CREATE INDEX CONCURRENTLY event_inbox_received_key_idx ON event_inbox (received_at, event_id);
DROP INDEX CONCURRENTLY IF EXISTS event_inbox_received_idx;
ALTER INDEX event_inbox_received_key_idx RENAME TO event_inbox_received_idx;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS event_outbox_published_created_key_idx;
CREATE INDEX CONCURRENTLY event_outbox_published_created_key_idx
    ON event_outbox (created_at)
    WHERE published_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS event_outbox_published_created_idx;
ALTER INDEX event_outbox_published_created_key_idx RENAME TO event_outbox_published_created_idx;

DROP INDEX CONCURRENTLY IF EXISTS event_inbox_received_key_idx;
CREATE INDEX CONCURRENTLY event_inbox_received_key_idx ON event_inbox (received_at);
DROP INDEX CONCURRENTLY IF EXISTS event_inbox_received_idx;
ALTER INDEX event_inbox_received_key_idx RENAME TO event_inbox_received_idx;
