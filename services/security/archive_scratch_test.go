package security_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/services/security"
)

// fleetRow is the archive_records row's facts.
type fleetRow struct {
	archivetest.LedgerRow
	SourceService  string
	ArchivedByName *string
	RetentionUntil *time.Time
	LegalHold      bool
	PurgedAt       *time.Time
	PurgedBy       *string
}

func fleetRows(t *testing.T, db *kerneltest.DB) []fleetRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT archive_id, table_name, data_key, manifest_key, data_sha256, record_count,
		       store_endpoint, store_bucket, first_record_id, last_record_id,
		       first_record_at, last_record_at, hot_window_days, archived_at, archived_by,
		       source_service, archived_by_name, retention_until::timestamptz, legal_hold, purged_at, purged_by
		FROM archive_records ORDER BY archive_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleetRow, error) {
		var f fleetRow
		l := &f.LedgerRow
		err := r.Scan(&l.ArchiveID, &l.TableName, &l.DataKey, &l.ManifestKey, &l.DataSHA256, &l.RecordCount,
			&l.StoreEndpoint, &l.StoreBucket, &l.FirstRecordID, &l.LastRecordID, &l.FirstRecordAt, &l.LastRecordAt,
			&l.HotWindowDays, &l.ArchivedAt, &l.ArchivedBy,
			&f.SourceService, &f.ArchivedByName, &f.RetentionUntil, &f.LegalHold, &f.PurgedAt, &f.PurgedBy)
		return f, err
	})
	require.NoError(t, err)
	return out
}

// securityEngine is an engine over security's tables and bookkeeping on db
// and a scratch prefix of the real store, batches of 10.
func securityEngine(ctx context.Context, t *testing.T, db *kerneltest.DB) *archive.Engine {
	t.Helper()
	return securityEngineWith(ctx, t, db, func(*archive.Config) {})
}

// securityEngineWith is securityEngine with its configuration changed by
// set (the service name is the scratch prefix's).
func securityEngineWith(ctx context.Context, t *testing.T, db *kerneltest.DB, set func(*archive.Config)) *archive.Engine {
	t.Helper()
	s3 := kerneltest.NewS3Scratch(t)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	m, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	cfg := archive.Config{Service: s3.Service, HotWindowDays: 90, BatchSize: 10, MaxBatchBytes: archive.DefaultMaxBatchBytes}
	set(&cfg)
	eng, err := archive.New(db.Pool, st, security.ArchiveTables(), security.Bookkeep, cfg,
		slog.New(&kerneltest.LogRecorder{}), m)
	require.NoError(t, err)
	return eng
}

// TestOwnArchivesBookTheFleetLedger: each of security's own archives gets
// its fleet ledger row (source craig-security) in the same transaction as
// its local ledger row, with the same facts; the lifecycle columns start
// empty (no display name, no retention date, no hold, not purged); and the
// staged event is security.archive_completed.
func TestOwnArchivesBookTheFleetLedger(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO audit_log (occurred_at, actor, action) SELECT now() - interval '100 days' - make_interval(mins => g), 'user:ann', 'case.viewed' FROM generate_series(1, 25) g`)
	db.Exec(t, `INSERT INTO dead_letter_audit (dlq_received_at, event_type, payload, reason) SELECT now() - interval '95 days', 'x.y', '{}', 'boom' FROM generate_series(1, 4)`)
	db.Exec(t, `INSERT INTO audit_log (actor, action) VALUES ('user:bob', 'login')`) // the defaults: hot
	eng := securityEngine(ctx, t, db)
	rep, err := eng.RunPass(ctx, 20)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.Equal(t, int64(25), rep.Table(security.AuditLogTable).Archived)
	require.Equal(t, int64(4), rep.Table(security.DeadLetterTable).Archived)

	ledger := archivetest.Ledger(ctx, t, db.Pool)
	require.Len(t, ledger, 4) // 10 + 10 + 5 audit_log, 4 dead_letter_audit
	fleet := fleetRows(t, db)
	require.Len(t, fleet, len(ledger))
	for i, f := range fleet {
		require.Equal(t, ledger[i], f.LedgerRow, "the fleet row carries the local ledger's facts")
		require.Equal(t, security.SourceService, f.SourceService)
		require.Nil(t, f.ArchivedByName)
		require.Nil(t, f.RetentionUntil)
		require.False(t, f.LegalHold)
		require.Nil(t, f.PurgedAt)
		require.Nil(t, f.PurgedBy)
	}
	events := archivetest.Events(ctx, t, db.Pool)
	require.Len(t, events, 4)
	for _, ev := range events {
		require.Equal(t, "security.archive_completed", ev.EventType)
		require.Equal(t, "craig-security", ev.Payload["source_service"])
	}
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM audit_log`))
}

// TestFleetRowRollsBackWithTheArchive: a fleet ledger insert that fails
// (here: the table is gone) rolls back the local ledger row, the event and
// the delete: nothing is half-booked.
func TestFleetRowRollsBackWithTheArchive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO audit_log (occurred_at, actor, action) SELECT now() - interval '100 days', 'user:ann', 'x' FROM generate_series(1, 5)`)
	db.Exec(t, `ALTER TABLE archive_records RENAME TO archive_records_gone`)
	eng := securityEngine(ctx, t, db)
	rep, err := eng.RunPass(ctx, 5)
	require.NoError(t, err)
	require.ErrorIs(t, rep.Table(security.AuditLogTable).Err, archive.ErrBookkeep)
	require.ErrorContains(t, rep.Table(security.AuditLogTable).Err, "fleet ledger")
	require.Equal(t, int64(5), db.Count(t, `SELECT count(*) FROM audit_log`))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM archive_ledger`))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM event_outbox`))
}

// TestPurgeNeverTouchesFleetCopies: security's purge acts
// on its own archive_ledger only; a due, unheld fleet row of another
// service (rules' archive, whose objects rules' ledger owns) is never a
// candidate and stays.
func TestPurgeNeverTouchesFleetCopies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO archive_records (archive_id, source_service, table_name, data_key, manifest_key, data_sha256, record_count,
		store_endpoint, store_bucket, first_record_id, last_record_id, first_record_at, last_record_at, hot_window_days, archived_at,
		archived_by, retention_until)
		VALUES (gen_random_uuid(), 'craig-rules', 'rule_evaluations', 'retention-archives/rules/x.ndjson', 'retention-archives/rules/x.manifest.json',
		repeat('a', 64), 5, 'http://e', 'b', gen_random_uuid(), gen_random_uuid(), now() - interval '400 days', now() - interval '399 days', 90,
		now() - interval '300 days', 'system:retention', CURRENT_DATE - 30)`)
	s3 := kerneltest.NewS3Scratch(t)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	mgr, err := lifecycle.New(db.Pool, st, lifecycle.Config{Service: s3.Service}, slog.New(&kerneltest.LogRecorder{}), pm)
	require.NoError(t, err)
	dry, err := mgr.Purge(ctx, 100, true, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, dry.Candidates)
	res, err := mgr.Purge(ctx, 100, false, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, res.Purged)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM archive_records WHERE purged_at IS NULL`))
}

// TestAuditLogCaseSpellings: audit_log's subject is case:<n> for every
// spelling of a case subject_id (the prefix in any letter case, '-' or
// ':', spaces, leading zeros), nothing for an id that names no case (a
// bare number names no kind), and never an error.
func TestAuditLogCaseSpellings(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	for in, want := range map[string]*string{
		"case-17": strp("case:17"), "Case-017": strp("case:17"), "case:17": strp("case:17"), " case-17 ": strp("case:17"),
		"case-17\u00a0": strp("case:17"), "17": nil, "person-17": nil, "case-17x": nil, "case-fresh-3": nil, "": nil,
		"case 17": strp("case:17"), "case_17": strp("case:17"), "case17": strp("case:17"), "case- 17": strp("case:17"),
		"case/17": strp("case:17"), "\u2003case-17\ufeff": strp("case:17"), "casey17": nil, "+17": nil, "#17": nil,
	} {
		var got *string
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT audit_log_case($1)`, in).Scan(&got), "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
}

func strp(s string) *string { return &s }

// TestDeliveredEventsAreTheirCasesRows: the audit row of a delivered event
// carries the event's payload; a payload's case_id makes it the case's, as
// the dead-lettered copy of the same event is (on main only the
// dead-lettered copy was the case's: a sealed and expunged case's
// delivered event still read unsealed). Hot rows match the case through
// the declared expressions, and an archive of them is indexed under it.
func TestDeliveredEventsAreTheirCasesRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO audit_log (occurred_at, actor, action, subject_id, detail) VALUES
		(now() - interval '200 days', 'craig-rules', 'event_consumed', NULL, '{"payload": {"case_id": 17, "note": "delivered"}}'),
		(now() - interval '200 days', 'craig-rules', 'event_consumed', 'person-4', '{"payload": {"case_id": "case-17"}}'),
		(now() - interval '200 days', 'ops', 'viewed', 'case-17', '{}'),
		(now() - interval '200 days', 'craig-rules', 'event_consumed', NULL, '{"payload": {"case_id": 18}}')`)
	db.Exec(t, `INSERT INTO dead_letter_audit (dlq_received_at, event_type, payload, reason) VALUES
		(now() - interval '200 days', 'rules.evaluated', '{"case_id": 17}', 'poison')`)
	for _, spec := range security.ArchiveTables() {
		want := map[string]int64{security.AuditLogTable: 3, security.DeadLetterTable: 1}[spec.Table]
		require.Equal(t, want, db.Count(t, `SELECT count(*) FROM `+spec.Table+` AS t WHERE `+archive.SubjectMatch(spec, 1), "case:17"), spec.Table)
	}
	key, err := subject.NewKey([]byte("security test subject key, 32 bytes or more"))
	require.NoError(t, err)
	eng := securityEngineWith(ctx, t, db, func(c *archive.Config) { c.LedgerHolds, c.SubjectKey = true, key })
	rep, err := eng.RunPass(ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	c17, err := subject.Parse("case:17")
	require.NoError(t, err)
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM archive_subjects s JOIN archive_ledger l USING (archive_id)
		WHERE s.subject_hashes @> ARRAY[$1::bytea]`, key.Hash(c17)), "both tables' archives are indexed under case:17")
}

// TestSecurityDatabaseRestoresFromABackup: a pg_dump of security's
// database restores with pg_restore (its subject functions have
// SQL-standard bodies: pg_restore builds their indexes with an empty
// search_path, where a body kept as text did not find retention_subject),
// and the restored indexes find a case's rows.
func TestSecurityDatabaseRestoresFromABackup(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO audit_log (actor, action, subject_id, detail) VALUES ('ops', 'viewed', 'case 17', '{"payload": {"case_id": "#17"}}')`)
	db.Exec(t, `INSERT INTO dead_letter_audit (event_type, payload, reason) VALUES ('rules.evaluated', '{"case_id": 17}', 'poison')`)
	restored := kerneltest.Restore(t, kerneltest.Backup(t, db))
	seeded := map[string]bool{security.AuditLogTable: true, security.DeadLetterTable: true}
	for _, spec := range security.ArchiveTables() {
		if seeded[spec.Table] {
			require.Equal(t, int64(1), restored.Count(t, `SELECT count(*) FROM `+spec.Table+` AS t WHERE `+archive.SubjectMatch(spec, 1), "case:17"), spec.Table)
			delete(seeded, spec.Table)
		}
	}
	require.Empty(t, seeded, "the seeded tables are archived tables")
}
