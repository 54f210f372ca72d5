package bench

// The benchmark's own SQL: the seeds of its scratch databases and the
// statements of the comparison baselines (the ceiling and the peers). They
// are reviewed like the SQL in queries/: every value is a bound parameter,
// except where COPY takes none (copyAgedEvaluations, whose window is a
// literal checked against the archiver's default at run time). The kernel's
// own statements are never restated here: the kernel configurations call
// the kernel.

// outboxPayload is the payload of a seeded outbox event g created at c.at:
// about the size of a real placement event.
const outboxPayload = `jsonb_build_object('case_id', 'case-' || lpad((g % 100000)::text, 6, '0'), 'seq', g,
                          'county', 'county-' || (g % 58), 'actor', 'worker-' || (g % 97),
                          'occurred_at', c.at, 'digest', md5(g::text))`

// drainRowTimes spreads $1 rows: 1..$2 over [now - 55 d, now - 31 d), the
// rest over [now - 29 d, now).
const drainRowTimes = `
FROM generate_series(1, $1::int) AS g,
LATERAL (SELECT CASE WHEN g <= $2::int
                     THEN now() - interval '55 days' + (g - 1) * (interval '24 days' / $2::int)
                     ELSE now() - interval '29 days' + (g - $2::int - 1) * (interval '29 days' / ($1::int - $2::int))
                END AS at) AS c`

// seedDrainOutbox inserts $1 event_outbox rows in created_at order (the
// physical order of an append-only table). Rows 1..$2 are old: created over
// [now - 55 d, now - 31 d), every 46th of them still pending (an undelivered
// event the sweep must keep); the rest are young, created over
// [now - 29 d, now), all published. The day of margin on either side of the
// 30-day window keeps the eligible set fixed for the whole run.
const seedDrainOutbox = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'case.placement_changed',
       ` + outboxPayload + `,
       c.at,
       CASE WHEN g <= $2::int AND g % 46 = 0 THEN NULL ELSE c.at + interval '2 seconds' END
` + drainRowTimes

// seedSteadyOutbox inserts $1 event_outbox rows at an even rate over the
// window ($2 days) + 1 hour, ending now, except for a 30-minute gap right
// after the cutoff: the oldest hour is eligible (the hourly cycle's work),
// and for the next half hour a cycle finds nothing eligible. The newest
// 0.01% are pending (events not delivered yet).
const seedSteadyOutbox = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'case.placement_changed',
       ` + outboxPayload + `,
       c.at,
       CASE WHEN g > $1::int - $1::int / 10000 THEN NULL ELSE c.at + interval '2 seconds' END
FROM generate_series(1, $1::int) AS g,
LATERAL (SELECT (g - 1)::float8 / $1::int * (make_interval(days => $2::int) + interval '30 minutes') AS t) AS o,
LATERAL (SELECT now() - make_interval(days => $2::int) - interval '1 hour' + o.t
                + CASE WHEN o.t >= interval '1 hour' THEN interval '30 minutes' ELSE interval '0' END AS at) AS c`

// countEligibleOutbox counts the rows the outbox sweep may delete at a
// window of $1 days (the sweep's predicate, read-only).
const countEligibleOutbox = `
SELECT count(*) FROM event_outbox
WHERE published_at IS NOT NULL AND created_at < now() - make_interval(days => $1::int)`

// seedRuleEvaluations inserts $1 rule evaluations of a realistic shape
// (about 1.3 KB of jsonb each, stored inline): rows 1..$2 are aged,
// evaluated over [now - 400 d, now - 91 d); the rest are hot, evaluated
// over [now - 89 d, now), and must be kept.
const seedRuleEvaluations = `
INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
SELECT c.at,
       'placement.eligibility.v' || (g % 7),
       jsonb_build_object(
           'case_id', 'case-' || lpad((g % 100000)::text, 6, '0'),
           'child', jsonb_build_object('age_months', g % 216, 'county', 'county-' || (g % 58),
                                       'language', (ARRAY['en', 'es', 'vi', 'zh'])[1 + g % 4],
                                       'needs', jsonb_build_array('medical', 'educational', 'behavioral')),
           'placement', jsonb_build_object('kind', (ARRAY['kinship', 'foster', 'group', 'residential'])[1 + g % 4],
                                           'provider_id', 'prov-' || (g % 5000), 'since', (c.at - interval '200 days')::date),
           'facts', (SELECT jsonb_agg(jsonb_build_object('code', 'F' || ((g * 7 + k) % 900), 'value', (g * 13 + k) % 1000,
                                                         'source', 'intake', 'observed_at', c.at - k * interval '1 day'))
                     FROM generate_series(1, 12) AS k),
           'notes', repeat(md5(g::text), 4)),
       jsonb_build_object('eligible', g % 3 <> 0, 'score', (g % 1000) / 10.0,
                          'reasons', jsonb_build_array('R' || (g % 40), 'R' || (g % 17)), 'engine', 'rules-2026.11')
FROM generate_series(1, $1::int) AS g,
LATERAL (SELECT CASE WHEN g <= $2::int
                     THEN now() - interval '400 days' + (g - 1) * (interval '309 days' / $2::int)
                     ELSE now() - interval '89 days' + (g - $2::int - 1) * (interval '89 days' / greatest($1::int - $2::int, 1))
                END AS at) AS c`

// countAgedEvaluations counts the rule evaluations older than $1 days.
const countAgedEvaluations = `
SELECT count(*) FROM rule_evaluations WHERE evaluated_at < now() - make_interval(days => $1::int)`

// deleteUnbounded is the ceiling: one DELETE of every eligible outbox row.
const deleteUnbounded = `
DELETE FROM event_outbox
WHERE published_at IS NOT NULL AND created_at < now() - make_interval(days => $1::int)`

// forceIndexPlan makes the session's planner take the sweep index for the
// unbounded DELETE (the second ceiling candidate): no sequential and no
// bitmap scans.
var forceIndexPlan = []string{`SET enable_seqscan = off`, `SET enable_bitmapscan = off`}

// deleteRiverBatch is River's job-cleaner shape: DELETE … WHERE id IN
// (SELECT id … LIMIT n), repeated until a short batch.
const deleteRiverBatch = `
DELETE FROM event_outbox
WHERE id IN (SELECT id FROM event_outbox
             WHERE published_at IS NOT NULL AND created_at < now() - make_interval(days => $1::int)
             LIMIT $2::int)`

// deleteOldestFirstBatch is the oldest-first pattern (the Namastack
// documentation's): ORDER BY created_at LIMIT 1000, here without the
// sweep's index (dropIndexForOldestFirst), so every batch scans the table.
const deleteOldestFirstBatch = `
DELETE FROM event_outbox
WHERE id IN (SELECT id FROM event_outbox
             WHERE published_at IS NOT NULL AND created_at < now() - make_interval(days => $1::int)
             ORDER BY created_at
             LIMIT $2::int)`

// dropIndexForOldestFirst removes the sweep's partial index from the copy
// the oldest-first configuration runs on ("without index").
const dropIndexForOldestFirst = `DROP INDEX event_outbox_published_created_idx`

// oldestFirstBatch is the batch size of the oldest-first pattern.
const oldestFirstBatch = 1000

// copyAgedEvaluations is the archive's ceiling: the same aged rows, each as
// to_jsonb, streamed out by COPY. COPY takes no parameters, so the hot
// window is a literal; archiveCeilingWindowDays must equal the archiver's
// default hot window, and the run checks that it does.
const copyAgedEvaluations = `COPY (SELECT to_jsonb(t) FROM rule_evaluations AS t WHERE t.evaluated_at < now() - interval '90 days') TO STDOUT`

// archiveCeilingWindowDays is the literal window of copyAgedEvaluations.
const archiveCeilingWindowDays = 90

// walInsertLSN reads the WAL insert position (cluster-wide: WAL written by
// other databases' sessions in the same interval counts too).
const walInsertLSN = `SELECT pg_current_wal_insert_lsn()::text`

// walBytesSince is the WAL written since an insert position.
const walBytesSince = `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::bigint`

// otherActiveBackends counts sessions busy in databases that are not this
// run's (other people's work on the same server), for the busy note.
const otherActiveBackends = `
SELECT count(*) FROM pg_stat_activity
WHERE state = 'active' AND pid <> pg_backend_pid() AND backend_type = 'client backend'
  AND coalesce(left(datname, length($1::text)), '') <> $1::text`

// seedBigRuleEvaluations inserts $1 aged rule evaluations of about 200 KiB
// of jsonb text each ($2 hex characters of md5 chains: little to compress),
// evaluated over [now - 400 d, now - 91 d).
const seedBigRuleEvaluations = `
INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
SELECT now() - interval '400 days' + g * interval '1 minute', 'big.v1',
       jsonb_build_object('blob', (SELECT string_agg(md5(g::text || '/' || k::text), '') FROM generate_series(1, $2::int / 32) AS k)),
       '{}'::jsonb
FROM generate_series(1, $1::int) AS g`

// seedAuditLog inserts $1 audit_log entries of a realistic shape (a case
// access with its request context, about 0.5 KB of jsonb): rows 1..$2 are
// aged, over [now - 400 d, now - 91 d); the rest are hot, over
// [now - 89 d, now), and must be kept.
const seedAuditLog = `
INSERT INTO audit_log (occurred_at, actor, action, subject_id, detail)
SELECT c.at, 'worker-' || (g % 97), (ARRAY['case.viewed', 'case.updated', 'placement.approved', 'report.exported'])[1 + g % 4],
       'case-' || lpad((g % 100000)::text, 6, '0'),
       jsonb_build_object('ip', '10.' || (g % 250) || '.' || (g % 199) || '.' || (g % 97), 'session', md5(g::text),
                          'county', 'county-' || (g % 58), 'user_agent', 'craig-web/2026.11 (' || (g % 13) || ')',
                          'fields', jsonb_build_array('placement', 'contacts', 'medical', 'education'),
                          'reason', repeat(md5((g * 7)::text), 3))
FROM generate_series(1, $1::int) AS g,
LATERAL (SELECT CASE WHEN g <= $2::int
                     THEN now() - interval '400 days' + (g - 1) * (interval '309 days' / $2::int)
                     ELSE now() - interval '89 days' + (g - $2::int - 1) * (interval '89 days' / greatest($1::int - $2::int, 1))
                END AS at) AS c`

// countAgedAuditLog counts the audit_log entries older than $1 days.
const countAgedAuditLog = `
SELECT count(*) FROM audit_log WHERE occurred_at < now() - make_interval(days => $1::int)`

// copyAgedAuditLog is the security archive's ceiling (the window literal
// as in copyAgedEvaluations).
const copyAgedAuditLog = `COPY (SELECT to_jsonb(t) FROM audit_log AS t WHERE t.occurred_at < now() - interval '90 days') TO STDOUT`

// firstDataKeys lists the data objects of the first $1 unpurged archives in
// the order a verification walks the ledger (LedgerToVerify: by archive_id).
const sqlFirstDataKeys = `
SELECT data_key, data_sha256 FROM archive_ledger
WHERE purged_at IS NULL
ORDER BY archive_id
LIMIT $1`

// seedPartitionOutbox is seedDrainOutbox with the undelivered events of
// only the old days whose day of the month $3 divides ($3 = 0: none): the
// layouts where partition retirement drops every old day whole (a relay
// that keeps up), or most of them and keeps the others (one day in eight
// with a stuck event: their pending rows are evidence).
const seedPartitionOutbox = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'case.placement_changed',
       ` + outboxPayload + `,
       c.at,
       CASE WHEN g <= $2::int AND g % 46 = 0 AND $3::int > 0 AND extract(day FROM c.at AT TIME ZONE 'UTC')::int % $3::int = 0 THEN NULL
            ELSE c.at + interval '2 seconds' END
` + drainRowTimes

// seedBloatDay inserts one simulated day of published outbox rows ($1
// rows, spread over the day $2 days ago).
const seedBloatDay = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'case.placement_changed',
       jsonb_build_object('case_id', 'case-' || lpad((g % 100000)::text, 6, '0'), 'seq', g, 'digest', md5(g::text)),
       c.at, c.at + interval '2 seconds'
FROM generate_series(1, $1::int) AS g,
LATERAL (SELECT date_trunc('day', now()) - make_interval(days => $2::int) + (g - 1) * (interval '1 day' / $1::int) AS at) AS c`

// outboxBytes is the outbox's size on disk, every partition, index and
// TOAST table included.
const outboxBytes = `
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_class c
WHERE c.oid = 'event_outbox'::regclass
   OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'event_outbox'::regclass)`

// The scale scenario's bookings ($1 exclusive and $2 inclusive bound the
// archives booked, $3 is the service's key prefix, $4 how many subjects an
// archive carries): ledger rows of archives that have no objects (the reads
// measured touch only the archives the read scenario's seed wrote), with
// their subject index and case rows, as the archiver books them. The
// subjects of archive i are drawn from 200,000 cases, so a case is in
// many archives, as over years of evaluations. One archive in 100 is due.
const (
	scaleBookLedger = `
INSERT INTO archive_ledger (archive_id, table_name, data_key, manifest_key, data_sha256, record_count, store_endpoint, store_bucket,
                            first_record_id, last_record_id, first_record_at, last_record_at, hot_window_days, archived_at, archived_by,
                            retention_until, subjects_indexed, case_rows_indexed)
SELECT md5($3 || i)::uuid, 'rule_evaluations', $3 || i || '.ndjson', $3 || i || '.manifest.json', encode(sha256(int8send(i)), 'hex'), 1000,
       'bench-scale', 'bench-scale', gen_random_uuid(), gen_random_uuid(), x.t, x.t + interval '1 hour', 90, x.t + interval '91 days',
       'system:archiver', CASE WHEN i % 100 = 0 THEN (now() AT TIME ZONE 'UTC')::date - 1 ELSE (now() AT TIME ZONE 'UTC')::date + 365 END, true, true
FROM generate_series($1::bigint + 1, $2::bigint) AS i,
     LATERAL (SELECT now() - interval '3650 days' + (i % 3650) * interval '1 day' AS t) AS x`
	scaleBookSubjects = `
INSERT INTO archive_subjects (archive_id, subject_hashes)
SELECT md5($3 || i)::uuid,
       ARRAY(SELECT DISTINCT sha256(int8send((i * 7 + j * 104729) % 200000)) FROM generate_series(1, $4::int) AS j)
FROM generate_series($1::bigint + 1, $2::bigint) AS i`
	scaleBookCases = `
INSERT INTO archive_cases (archive_id, subject_hash, others, subject_box, oldest_day, newest_day, rows)
SELECT DISTINCT ON (1, 2) md5($3 || i)::uuid, sha256(int8send((i * 7 + j * 104729) % 200000)), '\x'::bytea,
       sha512(int8send(j)) || sha256(int8send(i)), x.d, x.d, 100
FROM generate_series($1::bigint + 1, $2::bigint) AS i, generate_series(1, $4::int) AS j,
     LATERAL (SELECT ((now() AT TIME ZONE 'UTC') - interval '3650 days')::date + (i % 3650)::int AS d) AS x`
	// scaleBookFleet books $1 rows in security's archive_records, as the
	// fleet ledger holds them after years of inbound events.
	scaleBookFleet = `
INSERT INTO archive_records (archive_id, source_service, table_name, data_key, manifest_key, data_sha256, record_count,
                             store_endpoint, store_bucket, first_record_id, last_record_id, first_record_at, last_record_at,
                             hot_window_days, archived_at, archived_by, retention_until)
SELECT md5('fleet' || i)::uuid, 'rules', 'rule_evaluations', 'archive/rules/' || i || '.ndjson', 'archive/rules/' || i || '.manifest.json',
       encode(sha256(int8send(i)), 'hex'), 1000, 'bench-scale', 'bench-scale', gen_random_uuid(), gen_random_uuid(), x.t,
       x.t + interval '1 hour', 90, x.t + interval '91 days', 'system:archiver', (now() AT TIME ZONE 'UTC')::date + 365
FROM generate_series(1, $1::bigint) AS i,
     LATERAL (SELECT now() - interval '3650 days' + (i % 3650) * interval '1 day' AS t) AS x`
	// scaleSizes is the bytes on disk (tables, TOAST and indexes) of the
	// ledger, the subject index and the case rows.
	scaleSizes = `
SELECT pg_total_relation_size('archive_ledger'), pg_total_relation_size('archive_subjects'), pg_total_relation_size('archive_cases'),
       (SELECT count(*) FROM archive_ledger)`
)

// The archive floor's statements (floorOnce): a keyset cursor kept in a
// temporary table (COPY takes no parameters, so the cursor is read from
// it, never interpolated), the batch's COPY with its literal window (as
// copyAgedEvaluations) and batch size (the service's default), the
// cursor's advance, the DELETE by id and the ledger row.
const (
	floorCursorTable = `
CREATE TEMPORARY TABLE bench_floor_cursor AS SELECT '-infinity'::timestamptz AS at, '00000000-0000-0000-0000-000000000000'::uuid AS id`
	floorCopyEvaluations = `COPY (SELECT t.id, to_jsonb(t) FROM rule_evaluations AS t, bench_floor_cursor AS c
      WHERE t.evaluated_at < now() - interval '90 days' AND (t.evaluated_at, t.id) > (c.at, c.id)
      ORDER BY t.evaluated_at, t.id LIMIT 1000) TO STDOUT`
	floorAdvanceEvaluations = `UPDATE bench_floor_cursor SET at = t.evaluated_at, id = t.id FROM rule_evaluations AS t WHERE t.id = $1`
	floorDeleteEvaluations  = `DELETE FROM rule_evaluations WHERE id = ANY ($1::uuid[])`
	floorCopyAuditLog       = `COPY (SELECT t.id, to_jsonb(t) FROM audit_log AS t, bench_floor_cursor AS c
      WHERE t.occurred_at < now() - interval '90 days' AND (t.occurred_at, t.id) > (c.at, c.id)
      ORDER BY t.occurred_at, t.id LIMIT 10000) TO STDOUT`
	floorAdvanceAuditLog = `UPDATE bench_floor_cursor SET at = t.occurred_at, id = t.id FROM audit_log AS t WHERE t.id = $1`
	floorDeleteAuditLog  = `DELETE FROM audit_log WHERE id = ANY ($1::uuid[])`
	floorInsertLedger    = `
INSERT INTO archive_ledger (archive_id, table_name, data_key, manifest_key, data_sha256, record_count, store_endpoint, store_bucket,
                            first_record_id, last_record_id, first_record_at, last_record_at, hot_window_days, archived_at, archived_by)
VALUES ($1, $2, $3, $3, '', $4, 'floor', 'floor', $5, $6, now(), now(), 90, now(), 'bench:floor')`
)

// floorBatchSizes are the literal batch sizes of the floor's COPY
// statements, checked against the services' defaults at run time.
var floorBatchSizes = map[string]int{evaluationsTable: 1000, auditLogTable: 10000}
