-- The vacuum watchdog's reads (kernel/vacuumwatch): what keeps VACUUM from
-- reclaiming the rows the sweeps delete. Read-only, catalog views only.

-- name: VacuumHorizonHolders :many
-- Every holder of an xmin older than nothing: sessions of this database
-- (and WAL senders: a standby's hot_standby_feedback), prepared
-- transactions of this database, and replication slots. A session holds
-- its snapshot's xmin (backend_xmin) or, writing with no snapshot now (a
-- READ COMMITTED writer idle in transaction), its own transaction id
-- (backend_xid): VACUUM keeps every row deleted after the older of the
-- two. A running lazy VACUUM (pg_stat_progress_vacuum) is no holder: the
-- server leaves it out of the horizon. xmin_age is in transactions
-- (age()); held_seconds is how long it has been held, from the
-- transaction's start, where the server knows it (0 for a slot or a
-- standby's feedback: it does not); held_known is false for a session of
-- another role the service's role may not see the times of (pg_monitor).
SELECT h.holder::text AS holder, h.name::text AS name, h.xmin_age::bigint AS xmin_age,
       coalesce(h.held_seconds, 0)::float8 AS held_seconds, h.held_known::bool AS held_known
FROM (
    SELECT 'backend' AS holder, a.pid::text AS name, greatest(age(a.backend_xmin), age(a.backend_xid)) AS xmin_age,
           CASE WHEN a.backend_type = 'walsender' THEN NULL -- a standby's feedback: no start the server knows
                ELSE extract(epoch FROM now() - coalesce(a.xact_start, a.backend_start)) END AS held_seconds,
           a.backend_type = 'walsender' OR a.xact_start IS NOT NULL OR a.backend_start IS NOT NULL AS held_known
      FROM pg_catalog.pg_stat_activity a
     WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL) AND a.pid <> pg_backend_pid()
       AND (a.datname = current_database() OR a.backend_type = 'walsender')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_progress_vacuum v WHERE v.pid = a.pid)
    UNION ALL
    SELECT 'prepared', p.gid, age(p.transaction), extract(epoch FROM now() - p.prepared), true
      FROM pg_catalog.pg_prepared_xacts p
     WHERE p.database = current_database()
    UNION ALL
    SELECT 'slot', s.slot_name, greatest(age(s.xmin), age(s.catalog_xmin)), NULL, true
      FROM pg_catalog.pg_replication_slots s
     WHERE s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL
) h
ORDER BY h.xmin_age DESC, h.holder, h.name;

-- name: SlotRetainedWAL :many
-- The WAL each replication slot keeps on the primary's disk, in bytes.
SELECT s.slot_name::text AS slot_name, s.slot_type::text AS slot_type, s.active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint AS retained_bytes
  FROM pg_catalog.pg_replication_slots s
 WHERE s.restart_lsn IS NOT NULL
 ORDER BY s.slot_name;

-- name: DeadTuples :many
-- Dead and live tuples of the given tables (the statistics collector's
-- view: a second or so behind).
SELECT t.relname::text AS table_name, t.n_dead_tup::bigint AS dead, t.n_live_tup::bigint AS live
  FROM pg_catalog.pg_stat_user_tables t
 WHERE t.schemaname = current_schema() AND t.relname = ANY(sqlc.arg(tables)::text[])
 ORDER BY t.relname;
