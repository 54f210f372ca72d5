-- Outbox dead letters (ADR-075, docs/adr/0075-outbox-dead-letters.md).
--
-- Every failed publication of an outbox row is counted (attempts) with its
-- time (last_attempt_at) beside its reason (last_error). A row that can never
-- be published (a malformed envelope), or one that failed outbox.max_attempts
-- times, is dead-lettered: dead_lettered_at is stamped and published_at stays
-- NULL. The drain no longer claims it; the published-outbox sweep never
-- deletes it (its predicate is published_at IS NOT NULL); it is evidence of an
-- event that never left, kept until outbox.dead_letter_retention_days after
-- dead_lettered_at (0: forever). An operator's retry (POST
-- /admin/outbox/dead-letters/{id}/retry) puts it back to the drain with
-- attempts 0 and records who (retried_by) and when (retried_at).
--
-- Rows this migration finds stamped published WITH a last_error were
-- dead-lettered by the previous drain, which marked a malformed envelope as
-- published (MarkPublished and a replay clear last_error; only that mark
-- kept one). They are turned back into what they are: dead letters, dated
-- by that stamp, so the published sweep can no longer delete them.
--
-- The columns are added with constant defaults (no table rewrite); the
-- conversion reads the published rows once under the ALTER's lock (about a
-- second per million rows). No index is added: dead letters are a subset of
-- the unpublished rows, which the pending partial index already holds.

-- +goose Up
ALTER TABLE event_outbox
    ADD COLUMN attempts         integer NOT NULL DEFAULT 0,
    ADD COLUMN last_attempt_at  timestamptz,
    ADD COLUMN dead_lettered_at timestamptz,
    ADD COLUMN retried_by       text,
    ADD COLUMN retried_at       timestamptz;

UPDATE event_outbox
SET dead_lettered_at = published_at, last_attempt_at = published_at, attempts = 1, published_at = NULL
WHERE published_at IS NOT NULL AND last_error IS NOT NULL;

-- A replica of the previous release still draining during a rolling
-- deploy knows nothing of dead letters, and claims them (it reads
-- published_at only). What it writes is kept true here: its malformed mark
-- (published_at stamped WITH a last_error) makes or keeps the row a dead
-- letter, never published, so it is never swept as published; its publish
-- mark (published_at stamped, last_error cleared) on a dead letter means
-- the broker took it: it left, so it is published and no longer a dead
-- letter (a row is never both). The WHEN clause is false for every write of
-- this release (its MarkPublished clears last_error and never touches a
-- dead letter), so the function runs only for an older drain's writes.
-- +goose StatementBegin
CREATE FUNCTION event_outbox_keep_dead_letters() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.last_error IS NULL THEN
        NEW.dead_lettered_at := NULL;
        RETURN NEW;
    END IF;
    NEW.published_at := NULL;
    IF OLD.dead_lettered_at IS NULL THEN
        NEW.dead_lettered_at := now();
        NEW.attempts := OLD.attempts + 1;
        NEW.last_attempt_at := now();
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER event_outbox_keep_dead_letters
    BEFORE UPDATE OF published_at ON event_outbox
    FOR EACH ROW
    WHEN (OLD.published_at IS NULL AND NEW.published_at IS NOT NULL
          AND (NEW.last_error IS NOT NULL OR OLD.dead_lettered_at IS NOT NULL))
    EXECUTE FUNCTION event_outbox_keep_dead_letters();

-- +goose Down
DROP TRIGGER event_outbox_keep_dead_letters ON event_outbox;
DROP FUNCTION event_outbox_keep_dead_letters();
-- Dead letters become pending rows again (the drain retries them): nothing
-- is stamped published that never was.
ALTER TABLE event_outbox
    DROP COLUMN retried_at,
    DROP COLUMN retried_by,
    DROP COLUMN dead_lettered_at,
    DROP COLUMN last_attempt_at,
    DROP COLUMN attempts;
