package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/reconcile"
	"github.com/craig/retention/kernel/schedule"
)

const execSchedule = `version: "x-1"
items:
  - id: CW-12
    series: rule_evaluations
    starts: case.closed
    retain: P30D
    authority: GRS-2482, authorized 1998-03-20
`

// execute lets the rig's finder execute batches with the world's court
// orders and store, indexing its archives by case first.
func (h *hostileDue) execute(t *testing.T) {
	t.Helper()
	w := h.w
	h.f.WithExecution(disposition.Execution{Service: w.s3.Service, Orders: w.orders, Store: w.st,
		Index: func(ctx context.Context) (int64, error) {
			rep, err := w.reader.IndexCaseRows(ctx, 100)
			return rep.Left, err
		}})
}

// TestDispositionExecution: a batch of case 17 (closed 60 days ago, due
// under CW-12) approved by a second identity destroys its rows hot and in
// every archive (the archive all of whose rows are its is purged whole,
// the others rewritten once), leaves every row of case 18 (open: never
// due) readable and verified, writes a certificate that names the item
// and its authority and no case in clear, answers a later records
// request with the disposal, counts the rows, and changes nothing when
// approved again. Self-approval is refused and changes nothing.
func TestDispositionExecution(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, execSchedule)
	w := h.w
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	bBefore, _ := w.fetch(t, "case:18")
	aBefore, _ := w.fetch(t, "case:17")
	require.NotEmpty(t, aBefore)

	reg := prometheus.NewRegistry()
	dm, err := metrics.NewDispositions(reg)
	require.NoError(t, err)
	h.f.WithExecution(disposition.Execution{Service: w.s3.Service, Orders: w.orders, Store: w.st, Executed: dm.ExecutedRows,
		Index: func(ctx context.Context) (int64, error) {
			rep, err := w.reader.IndexCaseRows(ctx, 100)
			return rep.Left, err
		}})
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	require.Len(t, b.Items, 1)
	require.Len(t, b.Items[0].Cases, 1)
	require.Equal(t, "case:17", b.Items[0].Cases[0].Subject)
	frozen := b.Items[0].Cases[0].RowsHot + b.Items[0].Cases[0].RowsArchived

	_, err = h.f.Approve(w.ctx, b.ID, "OPS:Rita")
	require.ErrorIs(t, err, disposition.ErrSelfApproval)
	require.Equal(t, "proposed", must(h.f.Get(w.ctx, b.ID))(t).Status, "a refused approval changes nothing")

	res, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	require.Equal(t, "executed", res.Status)
	require.Equal(t, frozen, res.RowsDestroyed, "every row the batch froze")
	require.Equal(t, 1, res.CasesDestroyed)
	require.Zero(t, res.CasesSkipped)
	require.Equal(t, 1, res.ArchivesPurged, "the archive of case 17's rows only")
	require.Equal(t, 2, res.ArchivesRewritten, "the archives it shares with case 18")
	w.canaryNowhere(t)
	aAfter, sum := w.fetch(t, "case:17")
	require.Empty(t, aAfter)
	require.Len(t, sum.Summary.Disposed, 1)
	require.Equal(t, b.ID, sum.Summary.Disposed[0].DispositionID)
	require.Equal(t, "CW-12", sum.Summary.Disposed[0].Item)
	require.Equal(t, "GRS-2482, authorized 1998-03-20", sum.Summary.Disposed[0].Authority)
	bAfter, _ := w.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter), "every row of case 18 is still there")
	rep, err := w.reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, rep.Failed, "%+v", rep)

	cert, err := w.st.Get(w.ctx, res.CertificateKey)
	require.NoError(t, err)
	require.Equal(t, disposition.CertificateKey(w.s3.Service, b.ID), res.CertificateKey)
	var c struct {
		ID         string    `json:"disposition_id"`
		Version    string    `json:"schedule_version"`
		Proposed   string    `json:"proposed_by"`
		Approved   string    `json:"approved_by"`
		ApprovedAt time.Time `json:"approved_at"`
		ExecutedAt time.Time `json:"executed_at"`
		Items      []struct {
			Item, Authority string
			Rows            map[string]int64
		} `json:"items"`
		Archives []struct {
			Purged bool `json:"purged"`
		} `json:"archives"`
		Cases []struct {
			Hash    string `json:"subject_hash"`
			Outcome string `json:"outcome"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(cert, &c))
	require.Equal(t, b.ID.String(), c.ID)
	require.Equal(t, "x-1", c.Version)
	require.Equal(t, "ops:rita", c.Proposed)
	require.Equal(t, "ops:sam", c.Approved)
	require.True(t, c.ApprovedAt.Before(c.ExecutedAt), "approved %v, executed %v", c.ApprovedAt, c.ExecutedAt)
	require.Equal(t, "GRS-2482, authorized 1998-03-20", c.Items[0].Authority)
	require.Equal(t, frozen, c.Items[0].Rows["rule_evaluations"])
	require.Len(t, c.Archives, 3)
	require.Equal(t, "destroyed", c.Cases[0].Outcome)
	require.NotContains(t, string(cert), "case:17")
	require.NotContains(t, strings.ToLower(string(cert)), `"subject":`)
	require.Equal(t, float64(frozen), testutil.ToFloat64(dm.ExecutedRows.WithLabelValues("rule_evaluations", "CW-12")))
	got := must(h.f.Get(w.ctx, b.ID))(t)
	require.Equal(t, "executed", got.Status)
	require.Empty(t, got.Items[0].Cases[0].Subject, "an executed batch names its cases by hash only")

	again, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	require.Equal(t, res.RowsDestroyed, again.RowsDestroyed)
	require.Equal(t, res.CertificateKey, again.CertificateKey)
	require.Equal(t, res.CasesDestroyed, again.CasesDestroyed, "the outcome answered again")
	require.Equal(t, float64(frozen), testutil.ToFloat64(dm.ExecutedRows.WithLabelValues("rule_evaluations", "CW-12")), "counted once")
}

// TestDispositionExecutionSkipsWhatStoppedBeingDue: between the freeze
// and the approval, case 17 is put under a subject hold and case 18
// (closed too) is reopened: the execution destroys nothing of either,
// reports both skipped with their reason in the certificate, and every
// row still reads.
func TestDispositionExecutionSkipsWhatStoppedBeingDue(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, execSchedule)
	w := h.w
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	h.event(t, "case.closed", "case:18", h.now.AddDate(0, 0, -60), "Substantiated", "")
	aBefore, _ := w.fetch(t, "case:17")
	bBefore, _ := w.fetch(t, "case:18")
	h.execute(t)
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	require.Len(t, b.Items[0].Cases, 2)

	w.db.Exec(t, `INSERT INTO archive_holds (title, reason, created_by, subject_hashes) VALUES ('t', 'r', 'ops:carol', ARRAY[$1::bytea])`,
		w.key.Hash(mustSubject(t, "case:17")))
	h.event(t, "case.reopened", "case:18", h.now.Add(-time.Minute), "", "")

	res, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	require.Zero(t, res.RowsDestroyed)
	require.Equal(t, 2, res.CasesSkipped)
	require.Zero(t, res.ArchivesRewritten+res.ArchivesPurged)
	aAfter, _ := w.fetch(t, "case:17")
	bAfter, _ := w.fetch(t, "case:18")
	require.Equal(t, ns(t, aBefore), ns(t, aAfter))
	require.Equal(t, ns(t, bBefore), ns(t, bAfter))
	cert, err := h.f.Certificate(w.ctx, b.ID)
	require.NoError(t, err)
	require.Contains(t, string(cert), `"outcome": "skipped"`)
	require.Contains(t, string(cert), "held by ")
	require.Contains(t, string(cert), "not due on ")
	require.NotContains(t, string(cert), `"outcome": "destroyed"`)
}

// newScheduledWorld is an order world with its journal, the execution
// schedule (x-1) proposed and approved under it, and case 17 closed 60
// days ago (journaled): its rows are due.
func newScheduledWorld(t *testing.T) (*orderWorld, journaled, *schedule.Schedules) {
	t.Helper()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	sch := schedule.New(w.db.Pool, modelSeries).WithJournal(live.j)
	doc, err := schedule.Parse([]byte(execSchedule), modelSeries)
	require.NoError(t, err)
	_, err = sch.Propose(w.ctx, doc, "ops:alice")
	require.NoError(t, err)
	_, err = sch.Approve(w.ctx, "x-1", "ops:bob", true)
	require.NoError(t, err)
	_, err = schedule.NewClocks(w.db.Pool, w.key).WithJournal(live.j).Apply(w.ctx,
		schedule.Event{Type: schedule.EventClosed, Case: mustSubject(t, "case:17"), At: time.Now().UTC().AddDate(0, 0, -60), Classification: "x"}, "ops:erin")
	require.NoError(t, err)
	return w, live, sch
}

// indexer indexes the world's archives by case on pool (the live
// database or a restored one) and says how many are left.
func (w *orderWorld) indexer(pool *pgxpool.Pool) func(ctx context.Context) (int64, error) {
	r := archiveread.New(pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	return func(ctx context.Context) (int64, error) {
		rep, err := r.IndexCaseRows(ctx, 100)
		return rep.Left, err
	}
}

// TestARestoreDoesNotBringDisposedRowsBack: a batch executed after the
// backup was taken (frozen after it too) is journaled; the restored
// database has case 17's rows back in its hot table and its old archives
// unsuperseded, refuses another approval while behind the journal, and
// `reconcile` destroys them again (objects, hot rows), books the
// successors again and records the batch by keyed hash: case 17 is
// nowhere, its disposal is answered, case 18 reads whole. A second
// reconcile changes nothing.
func TestARestoreDoesNotBringDisposedRowsBack(t *testing.T) {
	t.Parallel()
	w, live, sch := newScheduledWorld(t)
	series := modelSeries
	var err error
	bBefore, _ := w.fetch(t, "case:18")
	backup := kerneltest.Backup(t, w.db)

	index := w.indexer
	f := disposition.NewFinder(w.db.Pool, w.key, []archive.TableSpec{subjectSpec()}, sch).WithExecution(disposition.Execution{
		Service: w.s3.Service, Orders: live.orders, Store: w.st, Journal: live.j, Index: index(w.db.Pool)})
	_, err = index(w.db.Pool)(w.ctx)
	require.NoError(t, err)
	b, err := f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	res, err := f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	require.Positive(t, res.RowsDestroyed)
	w.canaryNowhere(t)

	restored := kerneltest.Restore(t, backup)
	require.Positive(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'case_id' = '17'`), "the backup has them")
	rj := journal.New(restored.Pool, w.st, w.s3.Service, &journal.Gate{})
	rsch := schedule.New(restored.Pool, series)
	rlive := w.journaled(t, restored.Pool)
	rf := disposition.NewFinder(restored.Pool, w.key, []archive.TableSpec{subjectSpec()}, rsch).WithExecution(disposition.Execution{
		Service: w.s3.Service, Orders: rlive.orders, Store: w.st, Journal: rj, Index: index(restored.Pool)})
	_, err = rf.Approve(w.ctx, b.ID, "ops:sam")
	require.ErrorIs(t, err, journal.ErrBehind, "nothing is executed while the database is behind the journal")

	reader := archiveread.New(restored.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	rec := reconcile.Reconciler{Journal: rj, Lifecycle: rlive.mgr, Orders: rlive.orders, Reader: reader, Schedules: rsch,
		Clocks: schedule.NewClocks(restored.Pool, w.key), Dispositions: rf, Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}
	rep, err := rec.Run(w.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Acts[journal.ActDisposition], "%+v", rep.Acts)
	require.False(t, rep.After.Behind())
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations AS t WHERE strpos(t::text, $1) > 0`, canary),
		"no disposed row is hot again")
	require.Equal(t, "executed", must(rf.Get(w.ctx, b.ID))(t).Status)
	rw := &subjectWorld{world: &world{ctx: w.ctx}, key: w.key, reader: reader}
	aAfter, sum := rw.fetch(t, "case:17")
	require.Empty(t, aAfter)
	require.Len(t, sum.Summary.Disposed, 1)
	bAfter, _ := rw.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter), "every row of case 18 reads from the restored database")
	vr, err := reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, vr.Failed, "%+v", vr)
	rep, err = rec.Run(w.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Reapplied, "a second run changes nothing")
}

// TestAutoDestroyTakesOnlyDestroyItems: with records.auto_destroy the
// worker's call destroys what a destroy item makes due (case 17, closed
// unsubstantiated) as two system identities, and leaves what a review item
// makes due (case 18) for the reviewers; a second call finds nothing.
func TestAutoDestroyTakesOnlyDestroyItems(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, `version: "a-1"
items:
  - id: CW-12
    series: rule_evaluations
    starts: case.closed
    retain: P30D
    authority: GRS-2482
  - id: CW-12U
    series: rule_evaluations
    when: {classification: Unsubstantiated}
    starts: case.closed
    retain: P30D
    action: destroy
    authority: Missouri CW manual 2.5
`)
	w := h.w
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "unsubstantiated", "")
	h.event(t, "case.closed", "case:18", h.now.AddDate(0, 0, -60), "Substantiated", "")
	bBefore, _ := w.fetch(t, "case:18")
	h.execute(t)
	h.index(t)
	res, err := h.f.AutoDestroy(w.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.CasesDestroyed)
	b := must(h.f.Get(w.ctx, res.DispositionID))(t)
	require.Equal(t, disposition.AutoProposer, b.ProposedBy)
	require.Equal(t, disposition.AutoApprover, *b.ApprovedBy)
	require.Len(t, b.Items, 1)
	require.Equal(t, "CW-12U", b.Items[0].Item)
	w.canaryNowhere(t)
	bAfter, _ := w.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter), "a review item waits for its reviewers")
	due, err := h.f.Find(w.ctx, time.Now(), 0)
	require.NoError(t, err)
	require.NotNil(t, caseOf(due, "case:18"))
	again, err := h.f.AutoDestroy(w.ctx)
	require.NoError(t, err)
	require.Zero(t, again.DispositionID, "nothing due under a destroy item")
}

// TestArchivesAreDatedByTheSchedule: under a version in force an archive
// is dated the day its last row falls due (the archive of case 17's rows
// only, closed 60 days ago under P30D), the others (with rows of open
// case 18) are undated; the purge destroys the dated one, and a purge
// that finds a reopened case's archive dated (from before the reopening)
// keeps it: its re-check in the destroying transaction asks the
// schedule, not the date.
func TestArchivesAreDatedByTheSchedule(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, execSchedule)
	w := h.w
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	h.index(t)
	n, err := h.f.DateArchives(w.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	dated := w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE purged_at IS NULL AND retention_until = $1::date`,
		h.now.AddDate(0, 0, -30).Format(time.DateOnly))
	require.Equal(t, int64(1), dated, "the archive of case 17's rows falls due 30 days after its closure")
	require.Equal(t, int64(3), w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE purged_at IS NULL AND retention_until IS NULL`))
	n, err = h.f.DateArchives(w.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "dating again changes nothing")

	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	mgr, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: w.key, SubjectTables: []string{"rule_evaluations"}, PurgeCheck: h.f.PurgeCheck()}, slog.New(w.logs), pm)
	require.NoError(t, err)
	// Reopened after its archive was dated: the date says due, the
	// schedule says never.
	h.event(t, "case.reopened", "case:17", h.now.Add(-time.Minute), "", "")
	res, err := mgr.Purge(w.ctx, 10, false, "ops:olga")
	require.NoError(t, err)
	require.Empty(t, res.Purged)
	require.Len(t, res.Skipped, 1)
	h.event(t, "case.closed", "case:17", h.now.Add(-30*time.Second), "Substantiated", "")
	res, err = mgr.Purge(w.ctx, 10, false, "ops:olga")
	require.NoError(t, err)
	require.Empty(t, res.Purged, "closed again today: due in 30 days")

	// Another world, never reopened: the purge destroys the dated archive
	// and nothing else, and case 18 still reads whole.
	h2 := newAttackDue(t, execSchedule)
	h2.event(t, "case.closed", "case:17", h2.now.AddDate(0, 0, -60), "Substantiated", "")
	h2.index(t)
	_, err = h2.f.DateArchives(h2.w.ctx)
	require.NoError(t, err)
	bBefore, _ := h2.w.fetch(t, "case:18")
	mgr2, err := lifecycle.New(h2.w.db.Pool, h2.w.st, lifecycle.Config{Service: h2.w.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: h2.w.key, SubjectTables: []string{"rule_evaluations"}, PurgeCheck: h2.f.PurgeCheck()}, slog.New(h2.w.logs), pm)
	require.NoError(t, err)
	res, err = mgr2.Purge(h2.w.ctx, 10, false, "ops:olga")
	require.NoError(t, err)
	require.Len(t, res.Purged, 1)
	bAfter, _ := h2.w.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter))
}

// TestARestoreKeepsAnExtension: a batch rejected with extend_until after
// the backup was taken is journaled; on the restored database case 17 is
// due again until `reconcile` records the rejection and its extension
// again, then it is not.
func TestARestoreKeepsAnExtension(t *testing.T) {
	t.Parallel()
	w, live, sch := newScheduledWorld(t)
	series := modelSeries
	var err error
	rep, err := w.reader.IndexCaseRows(w.ctx, 100)
	require.NoError(t, err)
	require.Zero(t, rep.Left)
	backup := kerneltest.Backup(t, w.db)

	f := disposition.NewFinder(w.db.Pool, w.key, []archive.TableSpec{subjectSpec()}, sch).WithExecution(disposition.Execution{
		Service: w.s3.Service, Orders: live.orders, Store: w.st, Journal: live.j})
	b, err := f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	until := time.Now().UTC().AddDate(1, 0, 0).Truncate(24 * time.Hour)
	_, err = f.Reject(w.ctx, b.ID, "ops:sam", "fair hearing FH-2026-7", &until)
	require.NoError(t, err)

	restored := kerneltest.Restore(t, backup)
	rsch := schedule.New(restored.Pool, series)
	rf := disposition.NewFinder(restored.Pool, w.key, []archive.TableSpec{subjectSpec()}, rsch)
	due, err := rf.Find(w.ctx, time.Now(), 0)
	require.NoError(t, err)
	require.NotNil(t, caseOf(due, "case:17"), "the backup knows no extension")
	rlive := w.journaled(t, restored.Pool)
	rj := journal.New(restored.Pool, w.st, w.s3.Service, &journal.Gate{})
	rrep, err := reconcile.Reconciler{Journal: rj, Lifecycle: rlive.mgr, Orders: rlive.orders, Schedules: rsch, Clocks: schedule.NewClocks(restored.Pool, w.key),
		Dispositions: rf, Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}.Run(w.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rrep.Acts[journal.ActDispositionRejected], "%+v", rrep.Acts)
	due, err = rf.Find(w.ctx, time.Now(), 0)
	require.NoError(t, err)
	require.Nil(t, caseOf(due, "case:17"), "extended until %s again", until.Format(time.DateOnly))
	got := must(rf.Get(w.ctx, b.ID))(t)
	require.Equal(t, "rejected", got.Status)
	require.Equal(t, until.Format(time.DateOnly), *got.ExtendUntil)
}

// TestACaseOnlyArchivedIsReportedDestroyed: a case whose rows are all in
// archives is destroyed by the rewrites alone; the hot step finds none of
// it left and the certificate reports it destroyed, not skipped.
func TestACaseOnlyArchivedIsReportedDestroyed(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, execSchedule)
	w := h.w
	w.db.Exec(t, `DELETE FROM rule_evaluations WHERE input ->> 'case_id' IN ('17', 'case-17')`)
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	h.execute(t)
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	require.Zero(t, b.Items[0].Cases[0].RowsHot)
	res, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	require.Equal(t, 1, res.CasesDestroyed)
	require.Zero(t, res.CasesSkipped)
	require.Equal(t, b.Items[0].Cases[0].RowsArchived, res.RowsDestroyed)
	w.canaryNowhere(t)
}

// TestABatchRacesAnArchivePass: a batch's approval and an archive pass
// start together (new aged rows of case 18 to archive); the archive lease
// lets one run at a time, the other answers busy and is called again, and
// in the end case 17 is nowhere while every row of case 18, old and new,
// reads.
func TestABatchRacesAnArchivePass(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, execSchedule)
	w := h.w
	h.execute(t)
	h.event(t, "case.closed", "case:17", h.now.AddDate(0, 0, -60), "Substantiated", "")
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - interval '200 days' + make_interval(mins => g), 'r', jsonb_build_object('case_id', 18, 'n', 500 + g), '{}' FROM generate_series(1, 12) g`)
	bBefore, _ := w.fetch(t, "case:18")
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)

	start := make(chan struct{})
	approved, passed := make(chan error, 1), make(chan error, 1)
	go func() {
		<-start
		_, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
		approved <- err
	}()
	go func() {
		<-start
		rep, err := w.eng.RunPass(w.ctx, 10)
		if err == nil {
			err = rep.Err()
		}
		passed <- err
	}()
	close(start)
	aerr, perr := <-approved, <-passed
	if errors.Is(aerr, disposition.ErrBusy) {
		_, aerr = h.f.Approve(w.ctx, b.ID, "ops:sam")
	}
	if errors.Is(perr, archive.ErrAlreadyRunning) {
		rep, err := w.eng.RunPass(w.ctx, 10)
		require.NoError(t, err)
		perr = rep.Err()
	}
	require.NoError(t, aerr)
	require.NoError(t, perr)
	w.canaryNowhere(t)
	bAfter, _ := w.fetch(t, "case:18")
	require.ElementsMatch(t, ns(t, bBefore), ns(t, bAfter), "every row of case 18 reads, archived or hot")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'case_id' = '18' AND evaluated_at < now() - interval '90 days'`),
		"the pass archived case 18's aged rows")
}

// TestRowsAboutNoCaseAreDisposedByDay: under an item starting at the
// record, rows about no case fall due each on its own date (grouped per
// day), while a case's rows wait for its newest record: a batch destroys
// the old rows about no case and nothing of cases 17 and 18 (whose newest
// records are 10 days old).
func TestRowsAboutNoCaseAreDisposedByDay(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, `version: "nc-1"
items:
  - id: RE-1
    series: rule_evaluations
    starts: record
    retain: P1Y
    authority: agency policy RP-1
`)
	w := h.w
	h.execute(t)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - interval '500 days' + make_interval(days => g), 'r', jsonb_build_object('n', 700 + g, 'note', 'NOCASE'), '{}' FROM generate_series(1, 3) g`)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '100 days', 'r', '{"n": 710, "note": "NOCASE-RECENT"}', '{}')`)
	a, _ := w.fetch(t, "case:17")
	b18, _ := w.fetch(t, "case:18")
	h.index(t)
	b, err := h.f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	require.Len(t, b.Items, 1)
	require.Len(t, b.Items[0].Cases, 3, "one group per day of the three old rows about no case")
	for _, c := range b.Items[0].Cases {
		require.Empty(t, c.Subject)
		require.NotNil(t, c.Day)
	}
	res, err := h.f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	require.Equal(t, int64(3), res.RowsDestroyed)
	require.Equal(t, 3, res.CasesDestroyed)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'NOCASE'`))
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'NOCASE-RECENT'`))
	aAfter, _ := w.fetch(t, "case:17")
	bAfter, _ := w.fetch(t, "case:18")
	require.Equal(t, ns(t, a), ns(t, aAfter))
	require.Equal(t, ns(t, b18), ns(t, bAfter))
}
