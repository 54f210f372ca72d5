-- lifecycle_at: the time (the producer's "at") of the newest lifecycle event
-- applied to a fleet row. Lifecycle events are applied in order per archive:
-- one whose "at" is not later than the row's lifecycle_at is stale (a replay
-- of an old event after its inbox row aged out, a reordering) and is refused
-- and counted, never applied over a newer state.

-- +goose Up
ALTER TABLE archive_records ADD COLUMN lifecycle_at timestamptz;

-- +goose Down
ALTER TABLE archive_records DROP COLUMN lifecycle_at;
