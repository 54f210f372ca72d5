package lifecycle_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/reconcile"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// journaled is a world's lifecycle manager and court orders on one
// database, with the journal of acts.
type journaled struct {
	pool     *pgxpool.Pool
	mgrStore *store.Store
	service  string
	key      subject.Key
	j        *journal.Journal
	mgr      *lifecycle.Manager
	orders   *courtorder.Orders
}

func (w *orderWorld) journaled(t *testing.T, pool *pgxpool.Pool) journaled {
	t.Helper()
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	j := journal.New(pool, w.st, w.s3.Service, &journal.Gate{})
	_, err = j.Compare(w.ctx)
	require.NoError(t, err)
	mgr, err := lifecycle.New(pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: w.key, SubjectTables: []string{"rule_evaluations"}, Journal: j}, slog.New(w.logs), pm)
	require.NoError(t, err)
	orders, err := courtorder.New(pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archive.TableSpec{subjectSpec()}, Key: w.key,
		ObjectLock: true, Bookkeep: archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep, Journal: j}, slog.New(w.logs))
	require.NoError(t, err)
	return journaled{pool: pool, mgrStore: w.st, service: w.s3.Service, key: w.key, j: j, mgr: mgr, orders: orders}
}

// reconcile re-applies the store's entries the database lacks, as
// `<service> reconcile` does.
func (s journaled) reconcile(t *testing.T, ctx context.Context) []journal.Act {
	t.Helper()
	st, err := s.j.Compare(ctx)
	require.NoError(t, err)
	var acts []journal.Act
	for _, seq := range st.Missing {
		e, err := s.j.Read(ctx, seq)
		require.NoError(t, err)
		switch e.Act {
		case journal.ActSeal, journal.ActUnseal, journal.ActExpunge:
			err = s.orders.Reapply(ctx, e, journal.Forgotten{})
		default:
			err = s.mgr.Reapply(ctx, e)
		}
		require.NoError(t, err, "entry %d (%s)", seq, e.Act)
		acts = append(acts, e.Act)
	}
	st, err = s.j.Compare(ctx)
	require.NoError(t, err)
	require.False(t, st.Behind(), "reconciled: %+v", st)
	return acts
}

// count counts rows of pool's database.
func count(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n))
	return n
}

// canaryInNoRow: no row of any table of pool's database holds the canary.
func canaryInNoRow(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, tbl := range tables {
		require.Zero(t, count(t, ctx, pool, `SELECT count(*) FROM `+tbl+` AS t WHERE strpos(t::text, $1) > 0`, canary), "table %s", tbl)
	}
}

// TestARestoreCannotResurrect: the database is backed up; then case 18 is
// sealed and held and case 17 expunged (its canary rows gone from every
// row and object). Restored from the backup, the database has the case 17
// rows back, no seal and no hold: the store's journal is ahead of it, so
// purges, passes and orders are refused (journal.ErrBehind) until the
// missing acts are re-applied. Then the seal and the hold are back (the
// hold under its own id, still active, holding case 18's archives), case
// 17's rows are in no row and no object version, the superseded archives
// are stamped and their successors booked again (verify finds nothing
// wrong), and reconciling again changes nothing.
func TestARestoreCannotResurrect(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	backup := kerneltest.Backup(t, w.db)

	_, err := live.orders.Seal(w.ctx, mustSubject(t, "case:18"), "WIC-18", "sealed juvenile record", "ops:alice")
	require.NoError(t, err)
	hold, err := live.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "case 18 hearing", Reason: "subpoena", Subjects: []string{"case:18"}}, "ops:carol")
	require.NoError(t, err)
	req, err := live.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-17", "unsubstantiated", []uuid.UUID{hold.ID}, "ops:alice")
	require.NoError(t, err)
	_, err = live.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	w.canaryNowhere(t)
	keys, err := w.st.List(w.ctx, journal.Prefix(w.s3.Service), 0)
	require.NoError(t, err)
	require.Len(t, keys, 3, "seal, hold, expungement: each in the store before it answered")

	// Someone with the store's credentials hides the expungement's entry
	// behind a delete marker and writes over the hold's: the journal reads
	// what was first written, under every marker.
	raw, err := blob.OpenBucket(w.ctx, w.s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	require.NoError(t, raw.Delete(w.ctx, journal.Key(w.s3.Service, 3)))
	forged, err := w.st.Get(w.ctx, journal.Key(w.s3.Service, 1))
	require.NoError(t, err)
	require.NoError(t, raw.WriteAll(w.ctx, journal.Key(w.s3.Service, 2), forged, nil))

	restored := kerneltest.Restore(t, backup)
	// A service on the restored database acts before it has compared the
	// journals: each act checks the store for the entry it would take.
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	early, err := lifecycle.New(restored.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: w.key, SubjectTables: []string{"rule_evaluations"}, Journal: journal.New(restored.Pool, w.st, w.s3.Service, &journal.Gate{})}, slog.New(w.logs), pm)
	require.NoError(t, err)
	restored.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1`)
	_, err = early.Purge(w.ctx, 10, false, "ops:alice")
	require.ErrorIs(t, err, journal.ErrBehind, "no purge before the first comparison either (it purged the forgotten hold's archives)")
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM archive_ledger WHERE purged_at IS NOT NULL AND expunge_id IS NULL`))
	restored.Exec(t, `UPDATE archive_ledger SET retention_until = NULL`)
	require.Positive(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = $1`, canary), "the backup holds case 17's rows")
	back := w.journaled(t, restored.Pool)
	st, err := back.j.Compare(w.ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3}, st.Missing)
	_, err = back.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.ErrorIs(t, err, journal.ErrBehind, "no purge while a restore forgot acts")
	_, err = back.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:19"}}, "ops:carol")
	require.ErrorIs(t, err, journal.ErrBehind, "no act: its entry would take a sequence number the store holds")
	_, err = back.orders.Seal(w.ctx, mustSubject(t, "case:19"), "WIC-19", "r", "ops:alice")
	require.ErrorIs(t, err, journal.ErrBehind)
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	eng, err := archive.New(restored.Pool, w.st, []archive.TableSpec{subjectSpec()}, archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: 5, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true,
			SubjectKey: w.key, Journal: back.j}, slog.New(w.logs), am)
	require.NoError(t, err)
	_, err = eng.RunPass(w.ctx, 10)
	require.ErrorIs(t, err, journal.ErrBehind)

	require.Equal(t, []journal.Act{journal.ActSeal, journal.ActHoldPlaced, journal.ActExpunge}, back.reconcile(t, w.ctx))
	canaryInNoRow(t, w.ctx, restored.Pool)
	w.canaryNowhere(t) // every object version: the store kept none
	require.Equal(t, int64(1), count(t, w.ctx, restored.Pool, `SELECT count(*) FROM subject_seals WHERE order_ref = 'WIC-18'`), "the seal is back")
	holds, err := back.mgr.Holds(w.ctx)
	require.NoError(t, err)
	require.Len(t, holds, 1)
	require.Equal(t, hold.ID, holds[0].ID, "the hold is back under its own id")
	require.True(t, holds[0].Active)
	require.Equal(t, "case 18 hearing", holds[0].Title)
	require.Equal(t, int64(3), count(t, w.ctx, restored.Pool, `SELECT count(*) FROM archive_ledger WHERE legal_hold AND purged_at IS NULL`),
		"A2 and the successors of A1 and A4 (case 18 is in each) are held")
	require.Equal(t, int64(2), count(t, w.ctx, restored.Pool, `SELECT count(*) FROM archive_ledger WHERE supersedes IS NOT NULL`), "the successors are booked again")
	require.Equal(t, int64(1), count(t, w.ctx, restored.Pool, `SELECT count(*) FROM expungements WHERE status = 'executed' AND subject_hash IS NULL`))
	reader := archiveread.New(restored.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	rep, err := reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, rep.Failed, "%+v", rep.Failures)
	require.Zero(t, rep.OrphanCount, "%v", rep.Orphans)
	var out bytes.Buffer
	_, err = reader.Subject(w.ctx, &out, mustSubject(t, "case:17"), "ops:dana")
	require.NoError(t, err)
	require.NotContains(t, out.String(), canary)

	ledger := count(t, w.ctx, restored.Pool, `SELECT count(*) FROM archive_ledger`)
	require.Empty(t, back.reconcile(t, w.ctx), "a second reconcile re-applies nothing")
	require.Equal(t, ledger, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM archive_ledger`))
	_, err = back.mgr.Purge(w.ctx, 10, true, "ops:alice")
	require.NoError(t, err, "reconciled: the service works again")
	_, err = back.orders.Seal(w.ctx, mustSubject(t, "case:19"), "WIC-19", "r", "ops:alice")
	require.NoError(t, err, "a new act takes the next sequence number")
	all, err := w.st.ListAllObjects(w.ctx, journal.Prefix(w.s3.Service))
	require.NoError(t, err)
	require.Len(t, all, 4, "entry 3 behind its delete marker, and the new act's 4")
}

// TestAJournalWithAGapRefusesToReconcile: an entry destroyed in the store
// (every version) and forgotten by a restore is a gap: nothing can
// re-apply it, so the database stays behind and the service refuses.
func TestAJournalWithAGapRefusesToReconcile(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	backup := kerneltest.Backup(t, w.db)
	for _, c := range []string{"case:18", "case:19", "case:20"} {
		_, err := live.orders.Seal(w.ctx, mustSubject(t, c), "WIC", "sealed", "ops:alice")
		require.NoError(t, err)
	}
	_, err := w.st.DestroyAllVersions(w.ctx, journal.Key(w.s3.Service, 2))
	require.NoError(t, err)
	restored := kerneltest.Restore(t, backup)
	back := w.journaled(t, restored.Pool)
	st, err := back.j.Compare(w.ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3}, st.Missing)
	require.Equal(t, []int64{2}, st.Gaps)
	_, err = back.orders.Seal(w.ctx, mustSubject(t, "case:21"), "WIC", "sealed", "ops:alice")
	require.ErrorIs(t, err, journal.ErrBehind)
	require.ErrorContains(t, back.j.Err(), "[2]")
}

// TestAPurgeApprovedAfterTheBackupIsExecutedAfterReconcile: the backup
// holds a purge awaiting approval; it was approved since. Reconciled, its
// archives are stamped purged and the purge itself executed by its
// approver (it stayed awaiting approval, and a second approval failed on
// its existing certificate); a release's reason comes back as it was.
func TestAPurgeApprovedAfterTheBackupIsExecutedAfterReconcile(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	key := testKey(t)
	journaledMgr := func(pool *pgxpool.Pool) (*lifecycle.Manager, *journal.Journal) {
		pm, err := metrics.NewPurge(prometheus.NewRegistry())
		require.NoError(t, err)
		j := journal.New(pool, w.st, w.s3.Service, &journal.Gate{})
		mgr, err := lifecycle.New(pool, w.st, lifecycle.Config{Service: w.s3.Service, ApprovalsRequired: 1, Tables: []string{"rule_evaluations"}, SubjectKey: key, Journal: j}, slog.New(&kerneltest.LogRecorder{}), pm)
		require.NoError(t, err)
		return mgr, j
	}
	a := w.archived(t, 400, "CURRENT_DATE - 1")
	w.archived(t, 401, "NULL")
	mgr, _ := journaledMgr(w.db.Pool)
	h, err := mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Table: ptr("rule_evaluations")}, "ops:carol")
	require.NoError(t, err)
	_, err = mgr.ReleaseHold(w.ctx, h.ID, "the hearing closed on 3 December", "ops:dave")
	require.NoError(t, err)
	res, err := mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	backup := kerneltest.Backup(t, w.db)
	_, err = mgr.Approve(w.ctx, *res.PurgeID, "ops:bob")
	require.NoError(t, err)

	restored := kerneltest.Restore(t, backup)
	back, j := journaledMgr(restored.Pool)
	st, err := j.Compare(w.ctx)
	require.NoError(t, err)
	require.Len(t, st.Missing, 1, "the purge's one archive")
	e, err := j.Read(w.ctx, st.Missing[0])
	require.NoError(t, err)
	require.NoError(t, back.Reapply(w.ctx, e))
	st, err = j.Compare(w.ctx)
	require.NoError(t, err)
	require.False(t, st.Behind())
	var status, approver string
	require.NoError(t, restored.Pool.QueryRow(w.ctx, `SELECT status, approved_by FROM purges WHERE purge_id = $1`, *res.PurgeID).Scan(&status, &approver))
	require.Equal(t, []string{"executed", "ops:bob"}, []string{status, approver})
	require.Equal(t, int64(1), restored.Count(t, `SELECT count(*) FROM archive_ledger WHERE purged_at IS NOT NULL AND archive_id = $1`, a.ArchiveID))
	_, err = back.Approve(w.ctx, *res.PurgeID, "ops:erin")
	require.ErrorIs(t, err, lifecycle.ErrNotAwaiting, "executed once")
	var reason string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT release_reason FROM archive_holds WHERE id = $1`, h.ID).Scan(&reason))
	require.Equal(t, "the hearing closed on 3 December", reason)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM retention_journal WHERE strpos(detail::text, 'hearing closed') > 0`), "the reason is sealed in the journal")
}

// TestRowsOnlyAnUnknownArchiveHoldsComeBack: rows written after the backup
// and archived after it exist, once the database is restored, only in an
// archive object the restored ledger does not know (nothing was journaled
// since: the service is not behind). An expungement of a case with rows in
// it refuses (ErrOrphans: it never writes rows from the store into the
// database); reconcile puts the rows back into the hot table and destroys
// the copy; approved again, the order reaches the case's rows and no other
// row is lost (on main the object stayed, with the expunged case's rows,
// and gc would have destroyed the others).
func TestRowsOnlyAnUnknownArchiveHoldsComeBack(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	backup := kerneltest.Backup(t, w.db)
	for n := 1; n <= 4; n++ {
		c, note := 18, "after-the-backup"
		if n%2 == 0 {
			c, note = 17, canary
		}
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '200 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', $2::int, 'n', 400 + $1, 'note', $3::text), '{}')`, n, c, note)
	}
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.NotEmpty(t, rep.Tables[0].Archives)

	restored := kerneltest.Restore(t, backup)
	back := w.journaled(t, restored.Pool)
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'after-the-backup'`), "the restore lost them")
	req, err := back.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-41", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = back.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.ErrorIs(t, err, courtorder.ErrOrphans, "an unknown object holds the case's rows and rows in no other place")
	rec := back.reconcileAll(t, w.ctx)
	require.Equal(t, int64(4), rec.Copies.PutBack, "the four rows the restore lost are put back")
	_, err = back.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	canaryInNoRow(t, w.ctx, restored.Pool)
	objs, err := w.st.ListAllObjects(w.ctx, "retention-archives/"+w.s3.Service+"/")
	require.NoError(t, err)
	for _, o := range objs {
		_, err := w.st.GetMatching(w.ctx, o.Key, func(b []byte) bool { return bytes.Contains(b, []byte(canary)) })
		require.Error(t, err, "no version of %s holds the expunged case's rows", o.Key)
	}
	require.Equal(t, int64(2), count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'after-the-backup'`),
		"case 18's rows the restore lost are hot again")
}

// TestAPurgeAfterTheBackupStaysDone: an archive booked after the backup is
// purged, then its data written again under its key (a late upload, or
// someone with the store's credentials). Restored, the ledger knows
// neither the archive nor the purge; reconcile re-applies the purge and
// puts back no row of the purged archive (without the journal's word on
// what the purge destroyed, it put them back into the hot table,
// resurrecting destroyed records), and leaves no version of its objects.
func TestAPurgeAfterTheBackupStaysDone(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	backup := kerneltest.Backup(t, w.db)
	for n := 1; n <= 3; n++ {
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '200 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', 18, 'n', 500 + $1, 'note', 'purged-later'), '{}')`, n)
	}
	live := w.journaled(t, w.db.Pool)
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.Len(t, rep.Tables[0].Archives, 1)
	x := rep.Tables[0].Archives[0].ArchiveID
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE archive_id = $1`, x)
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	plain, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, Tables: []string{"rule_evaluations"},
		SubjectKey: w.key, SubjectTables: []string{"rule_evaluations"}, Journal: live.j}, slog.New(w.logs), pm)
	require.NoError(t, err)
	keys := w.ledgerKeys(t, x)
	data, err := w.st.Get(w.ctx, keys[0])
	require.NoError(t, err)
	pr, err := plain.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Contains(t, pr.Purged, x)
	require.NoError(t, w.st.PutCreate(w.ctx, keys[0], data, store.ContentTypeNDJSON))

	restored := kerneltest.Restore(t, backup)
	back := w.journaled(t, restored.Pool)
	back.reconcileAll(t, w.ctx)
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'purged-later'`), "no purged row came back")
	for _, k := range keys {
		n, err := w.st.VersionCount(w.ctx, k)
		require.NoError(t, err)
		require.Zero(t, n, "no version of the purged %s is left", k)
	}
}

// reconcileAll runs the real reconcile (kernel/reconcile), copies included.
func (s journaled) reconcileAll(t *testing.T, ctx context.Context) reconcile.Report {
	t.Helper()
	reader := archiveread.New(s.pool, s.mgrStore, s.service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(s.key)
	rep, err := reconcile.Reconciler{Journal: s.j, Lifecycle: s.mgr, Orders: s.orders, Reader: reader, Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}.Run(ctx)
	require.NoError(t, err)
	require.False(t, rep.After.Behind())
	return rep
}

// TestPurgedRowsHotAtTheBackupStayGone: rows hot when the backup was taken
// are archived and that archive purged after it. Restored, the database
// holds them hot again; reconcile re-applies the purge and deletes them
// (the purge's journal entry names their ids): purged records never come
// back (they stayed hot, readable and archived again).
func TestPurgedRowsHotAtTheBackupStayGone(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	for n := 1; n <= 3; n++ {
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '200 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', 18, 'n', 600 + $1, 'note', 'purge-me'), '{}')`, n)
	}
	backup := kerneltest.Backup(t, w.db)
	live := w.journaled(t, w.db.Pool)
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.Len(t, rep.Tables[0].Archives, 1)
	x := rep.Tables[0].Archives[0].ArchiveID
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE archive_id = $1`, x)
	pr, err := live.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Contains(t, pr.Purged, x)

	restored := kerneltest.Restore(t, backup)
	require.Equal(t, int64(3), count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'purge-me'`), "the backup holds them hot")
	w.journaled(t, restored.Pool).reconcileAll(t, w.ctx)
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'purge-me'`), "no purged row is hot again")
}

// TestTwoExpungementsAfterTheBackupReconcile: archives hold cases 17, 18
// and 19; one of them is held by id, with a retention date of its own.
// After the backup case 17 is expunged (archives rewritten into
// successors), then case 18 (those successors rewritten again, or
// destroyed with nothing left). Restored, the first expungement's
// successors are gone from the store: the second destroyed them. Reconcile
// re-applies both (it stopped at the first: its successor's manifest was
// not found), and the ledger's live archives are the live database's:
// the same ids, lineage, retention dates and holds, the hold naming the
// last successor by id; neither case is in any row or object.
func TestTwoExpungementsAfterTheBackupReconcile(t *testing.T) {
	t.Parallel()
	w, _, backup, _, holdID := chainWorld(t)
	type liveArchive struct {
		ID         uuid.UUID
		Supersedes *uuid.UUID
		Retention  *string
		LegalHold  bool
	}
	ledger := func(pool *pgxpool.Pool) []liveArchive {
		rows, err := pool.Query(w.ctx, `SELECT archive_id, supersedes, retention_until::text, legal_hold FROM archive_ledger WHERE purged_at IS NULL ORDER BY archive_id`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[liveArchive])
		require.NoError(t, err)
		return out
	}
	heldIDs := func(pool *pgxpool.Pool) []uuid.UUID {
		var ids []uuid.UUID
		require.NoError(t, pool.QueryRow(w.ctx, `SELECT archive_ids FROM archive_holds WHERE id = $1`, holdID).Scan(&ids))
		return ids
	}
	want, wantHeld := ledger(w.db.Pool), heldIDs(w.db.Pool)
	require.Len(t, wantHeld, 3, "the held archive, its successor and the successor's")

	restored := kerneltest.Restore(t, backup)
	back := w.journaled(t, restored.Pool)
	rec := back.reconcileAll(t, w.ctx)
	require.Len(t, rec.Reapplied, 2)
	require.Equal(t, want, ledger(restored.Pool), "the live archives, their lineage, retention dates and holds")
	require.Equal(t, wantHeld, heldIDs(restored.Pool), "the hold names the successors")
	canaryInNoRow(t, w.ctx, restored.Pool)
	w.canaryNowhere(t)
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'case_id' = '18'`), "case 18 is expunged too")
	reader := archiveread.New(restored.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	vr, err := reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, vr.Failed, "%+v", vr.Failures)
	require.Zero(t, vr.OrphanCount, "%v", vr.Orphans)
	require.Empty(t, back.reconcileAll(t, w.ctx).Reapplied, "a second reconcile re-applies nothing")
}
