-- Converts an existing event_outbox into a table range-partitioned by
-- created_at, one partition a day, made and pre-made by pg_partman (issue
-- 15). Run it in one transaction (`go tool mage partition:outbox`) in a
-- maintenance window: it holds ACCESS EXCLUSIVE on event_outbox while it
-- copies the rows. pg_partman's own retention stays OFF: the kernel's sweep
-- retires partitions, and only after checking that no row in them must stay.
--
-- The primary key becomes (id, created_at): a unique key of a partitioned
-- table must include its partition key. Outbox ids are UUIDs drawn at
-- random or by time, never reused, so nothing depends on id alone being
-- enforced. (The inbox cannot be converted this way: its dedup needs
-- event_id unique across all time, which a table partitioned by
-- received_at cannot enforce.)
CREATE SCHEMA IF NOT EXISTS partman;
CREATE EXTENSION IF NOT EXISTS pg_partman SCHEMA partman;

LOCK TABLE event_outbox IN ACCESS EXCLUSIVE MODE;
ALTER TABLE event_outbox RENAME TO event_outbox_unpartitioned;
ALTER INDEX event_outbox_pkey RENAME TO event_outbox_unpartitioned_pkey;
ALTER INDEX event_outbox_pending_idx RENAME TO event_outbox_unpartitioned_pending_idx;
ALTER INDEX event_outbox_published_created_idx RENAME TO event_outbox_unpartitioned_published_created_idx;

-- Every column of the table as the transport migrations left it (its
-- defaults and NOT NULLs included), so a column a later migration adds
-- (the dead letters' attempts, dead_lettered_at, ...) is carried over.
CREATE TABLE event_outbox (
    LIKE event_outbox_unpartitioned INCLUDING DEFAULTS,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX event_outbox_pending_idx ON event_outbox (created_at) WHERE published_at IS NULL;
CREATE INDEX event_outbox_published_created_idx ON event_outbox (created_at, id) WHERE published_at IS NOT NULL;

-- Daily partitions from the oldest row's day to a week ahead, and a
-- default partition for anything outside them.
SELECT partman.create_parent('public.event_outbox', 'created_at', 'native', 'daily',
    p_premake := 7,
    p_start_partition := (SELECT to_char(date_trunc('day', coalesce(min(created_at), now()) AT TIME ZONE 'UTC'), 'YYYY-MM-DD HH24:MI:SS')
                          FROM event_outbox_unpartitioned));
UPDATE partman.part_config SET retention = NULL, infinite_time_partitions = true WHERE parent_table = 'public.event_outbox';

INSERT INTO event_outbox SELECT * FROM event_outbox_unpartitioned;

DO $$
BEGIN
    IF (SELECT count(*) FROM event_outbox) <> (SELECT count(*) FROM event_outbox_unpartitioned) THEN
        RAISE EXCEPTION 'event_outbox conversion: row counts differ; nothing was changed';
    END IF;
END $$;
DROP TABLE event_outbox_unpartitioned;

-- The transport migrations' row trigger (LIKE copies no trigger): an older
-- drain's malformed mark becomes a dead letter (transport 00010). On a
-- database not yet migrated to 00010 there is none to carry over: 00010
-- then creates it on the partitioned table.
DO $$
BEGIN
    IF to_regprocedure('event_outbox_keep_dead_letters()') IS NOT NULL THEN
        CREATE TRIGGER event_outbox_keep_dead_letters
            BEFORE UPDATE OF published_at ON event_outbox
            FOR EACH ROW
            WHEN (OLD.published_at IS NULL AND NEW.published_at IS NOT NULL
                  AND (NEW.last_error IS NOT NULL OR OLD.dead_lettered_at IS NOT NULL))
            EXECUTE FUNCTION event_outbox_keep_dead_letters();
    END IF;
END $$;
