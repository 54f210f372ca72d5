package lifecycle_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/reconcile"
	"github.com/craig/retention/kernel/schedule"
)

// hostile2Review: CW-12 (review) for every closed case, CW-12U (destroy)
// for closed unsubstantiated cases; both 30 days from the closure.
const hostile2Review = `version: "h2-1"
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
`

// TestHostile2AutoDestroyTakesARowOfAReviewCase: a row about case 17
// (closed unsubstantiated: destroy item) and case 99 (closed
// substantiated: review item, due but awaiting its reviewers). The
// row is a record of case 99 as much as of case 17: auto_destroy, which
// must never touch what a review item governs, must leave it.
func TestHostile2AutoDestroyTakesARowOfAReviewCase(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostile2Review, twoCaseSpec())
	w := h.w
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES
		(now() - interval '20 days', 'r', '{"case_id": 17, "other_case_id": 99, "n": 500}', '{}'),
		(now() - interval '20 days', 'r', '{"case_id": 99, "other_case_id": 17, "n": 501}', '{}'),
		(now() - interval '20 days', 'r', '{"case_id": 99, "n": 502}', '{}')`)
	h.event(t, schedule.EventClosed, "case:17", h.now.AddDate(0, 0, -60), "Unsubstantiated", "")
	h.event(t, schedule.EventClosed, "case:99", h.now.AddDate(0, 0, -60), "Substantiated", "")
	h.execute(t)
	h.index(t)
	due, err := h.f.Find(w.ctx, time.Now(), 0)
	require.NoError(t, err)
	require.NotNil(t, caseOf(due, "case:99"), "case 99 is due, under the review item")
	res, err := h.f.AutoDestroy(w.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.CasesPartial, "case 17: the rows it shares with case 99 are kept: %+v", res)
	left := w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE (input ->> 'n')::int IN (500, 501, 502)`)
	require.Equal(t, int64(3), left, "every record of case 99 (review item CW-12) waits for its reviewers; auto_destroy left %d of 3", left)
}

// TestHostile2BackupMidExecutionThenReconcile: a batch stops after its
// archive rewrites committed and before its hot rows were deleted (a
// DELETE trigger fails it); a backup is taken then; the batch is then
// finished (journaled). The database is restored from the mid-execution
// backup (batch `executing`, successors booked, hot rows present):
// approvals are refused, reconcile puts it right (no canary anywhere, the
// batch executed, case 18 whole, verify clean), a second reconcile
// changes nothing, and approving the batch again answers its outcome.
func TestHostile2BackupMidExecutionThenReconcile(t *testing.T) {
	t.Parallel()
	w, live, sch := newScheduledWorld(t)
	series := modelSeries
	var err error
	bBefore, _ := w.fetch(t, "case:18")

	index := w.indexer
	f := disposition.NewFinder(w.db.Pool, w.key, []archive.TableSpec{subjectSpec()}, sch).WithExecution(disposition.Execution{
		Service: w.s3.Service, Orders: live.orders, Store: w.st, Journal: live.j, Index: index(w.db.Pool)})
	_, err = index(w.db.Pool)(w.ctx)
	require.NoError(t, err)
	b, err := f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)

	w.db.Exec(t, `CREATE FUNCTION h2_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'h2: crash before the hot delete'; END $$`)
	w.db.Exec(t, `CREATE TRIGGER h2_no_delete BEFORE DELETE ON rule_evaluations FOR EACH ROW EXECUTE FUNCTION h2_no_delete()`)
	_, err = f.Approve(w.ctx, b.ID, "ops:sam")
	require.ErrorContains(t, err, "h2: crash before the hot delete")
	w.db.Exec(t, `DROP TRIGGER h2_no_delete ON rule_evaluations`)
	require.Equal(t, "executing", must(f.Get(w.ctx, b.ID))(t).Status)
	require.Positive(t, w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'case_id' = '17'`))
	backup := kerneltest.Backup(t, w.db)

	res, err := f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	require.Equal(t, "executed", res.Status)
	w.canaryNowhere(t)

	restored := kerneltest.Restore(t, backup)
	require.Equal(t, int64(1), count(t, w.ctx, restored.Pool, `SELECT count(*) FROM dispositions WHERE status = 'executing'`))
	rj := journal.New(restored.Pool, w.st, w.s3.Service, &journal.Gate{})
	rsch := schedule.New(restored.Pool, series)
	rlive := w.journaled(t, restored.Pool)
	rf := disposition.NewFinder(restored.Pool, w.key, []archive.TableSpec{subjectSpec()}, rsch).WithExecution(disposition.Execution{
		Service: w.s3.Service, Orders: rlive.orders, Store: w.st, Journal: rj, Index: index(restored.Pool)})
	_, err = rf.Approve(w.ctx, b.ID, "ops:sam")
	require.ErrorIs(t, err, journal.ErrBehind)
	_, _ = rf.AutoDestroy(w.ctx) // refused or nothing of its own: it must change nothing
	require.Equal(t, "executing", must(rf.Get(w.ctx, b.ID))(t).Status)

	reader := archiveread.New(restored.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	rec := reconcile.Reconciler{Journal: rj, Lifecycle: rlive.mgr, Orders: rlive.orders, Reader: reader, Schedules: rsch,
		Clocks: schedule.NewClocks(restored.Pool, w.key), Dispositions: rf, Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}
	rep, err := rec.Run(w.ctx)
	require.NoError(t, err)
	require.False(t, rep.After.Behind())
	canaryInNoRow(t, w.ctx, restored.Pool)
	require.Equal(t, "executed", must(rf.Get(w.ctx, b.ID))(t).Status)
	rw := &subjectWorld{world: &world{ctx: w.ctx}, key: w.key, reader: reader}
	aAfter, _ := rw.fetch(t, "case:17")
	require.Empty(t, aAfter)
	bAfter, _ := rw.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter))
	vr, err := reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, vr.Failed, "%+v", vr)
	again, err := rf.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)
	require.Equal(t, res.RowsDestroyed, again.RowsDestroyed)
	rep, err = rec.Run(w.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Reapplied)
	w.canaryNowhere(t)
}

// hostile2Destroy: every closed case's rows are destroyed 30 days after
// the closure, with no reviewer.
const hostile2Destroy = `version: "d-1"
items:
  - id: CW-D
    series: rule_evaluations
    starts: case.closed
    retain: P30D
    action: destroy
    authority: GRS-2482
`

// TestHostile2AutoDestroyOnARestoredDatabaseStrandsABatch: the database
// is restored from a backup older than a journaled act (a case event);
// the worker's auto_destroy runs before `reconcile`. It must change
// nothing (an approval is refused while behind). It freezes a batch
// anyway, which is never finished: after reconcile, case 17 (due under a
// destroy item, unheld) is never destroyed by auto_destroy again.
func TestHostile2AutoDestroyOnARestoredDatabaseStrandsABatch(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	series := []schedule.Series{{Table: "rule_evaluations"}}
	sch := schedule.New(w.db.Pool, series).WithJournal(live.j)
	doc, err := schedule.Parse([]byte(hostile2Destroy), series)
	require.NoError(t, err)
	_, err = sch.Propose(w.ctx, doc, "ops:alice")
	require.NoError(t, err)
	_, err = sch.Approve(w.ctx, "d-1", "ops:bob", true)
	require.NoError(t, err)
	clocks := schedule.NewClocks(w.db.Pool, w.key).WithJournal(live.j)
	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventClosed, Case: mustSubject(t, "case:17"), At: time.Now().UTC().AddDate(0, 0, -60), Classification: "x"}, "ops:erin")
	require.NoError(t, err)
	_, err = w.reader.IndexCaseRows(w.ctx, 100)
	require.NoError(t, err)
	backup := kerneltest.Backup(t, w.db)
	// A journaled act after the backup: any will do.
	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventClosed, Case: mustSubject(t, "case:55"), At: time.Now().UTC().AddDate(0, 0, -1), Classification: "x"}, "ops:erin")
	require.NoError(t, err)

	restored := kerneltest.Restore(t, backup)
	rj := journal.New(restored.Pool, w.st, w.s3.Service, &journal.Gate{})
	rsch := schedule.New(restored.Pool, series)
	rlive := w.journaled(t, restored.Pool)
	idx := archiveread.New(restored.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	rf := disposition.NewFinder(restored.Pool, w.key, []archive.TableSpec{subjectSpec()}, rsch).WithExecution(disposition.Execution{
		Service: w.s3.Service, Orders: rlive.orders, Store: w.st, Journal: rj, Index: func(ctx context.Context) (int64, error) {
			rep, err := idx.IndexCaseRows(ctx, 100)
			return rep.Left, err
		}})
	_, err = rf.AutoDestroy(w.ctx)
	require.ErrorIs(t, err, journal.ErrBehind)
	stranded := count(t, w.ctx, restored.Pool, `SELECT count(*) FROM dispositions WHERE proposed_by = $1`, disposition.AutoProposer)

	rec := reconcile.Reconciler{Journal: rj, Lifecycle: rlive.mgr, Orders: rlive.orders, Reader: idx, Schedules: rsch,
		Clocks: schedule.NewClocks(restored.Pool, w.key), Dispositions: rf, Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}
	_, err = rec.Run(w.ctx)
	require.NoError(t, err)
	res, err := rf.AutoDestroy(w.ctx)
	require.NoError(t, err)
	require.Positive(t, res.RowsDestroyed)
	require.Zero(t, stranded, "the refused call froze nothing")
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'case_id' IN ('17', 'case-17')`),
		"case 17 is due under a destroy item and unheld: auto_destroy destroys it")
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM dispositions WHERE status = 'proposed'`), "no batch is left undecided by the worker")
}

// TestHostile2RefreezeOnARestoredDatabase: restored from before the
// freeze, a batch of case 17 is not frozen again before `reconcile`
// (refused: the database is behind the store's journal); reconcile
// re-applies the executed batch, after which nothing is due: case 17
// nowhere, case 18 whole, verify clean, a second reconcile changes
// nothing.
func TestHostile2RefreezeOnARestoredDatabase(t *testing.T) {
	t.Parallel()
	w, live, sch := newScheduledWorld(t)
	series := modelSeries
	var err error
	bBefore, _ := w.fetch(t, "case:18")
	index := w.indexer
	_, err = index(w.db.Pool)(w.ctx)
	require.NoError(t, err)
	backup := kerneltest.Backup(t, w.db)
	f := disposition.NewFinder(w.db.Pool, w.key, []archive.TableSpec{subjectSpec()}, sch).WithExecution(disposition.Execution{
		Service: w.s3.Service, Orders: live.orders, Store: w.st, Journal: live.j, Index: index(w.db.Pool)})
	b, err := f.Freeze(w.ctx, 0, "ops:rita")
	require.NoError(t, err)
	_, err = f.Approve(w.ctx, b.ID, "ops:sam")
	require.NoError(t, err)

	restored := kerneltest.Restore(t, backup)
	rj := journal.New(restored.Pool, w.st, w.s3.Service, &journal.Gate{})
	rsch := schedule.New(restored.Pool, series)
	rlive := w.journaled(t, restored.Pool)
	rf := disposition.NewFinder(restored.Pool, w.key, []archive.TableSpec{subjectSpec()}, rsch).WithExecution(disposition.Execution{
		Service: w.s3.Service, Orders: rlive.orders, Store: w.st, Journal: rj, Index: index(restored.Pool)})
	_, err = rf.Freeze(w.ctx, 0, "ops:rita")
	require.ErrorIs(t, err, journal.ErrBehind, "nothing is frozen on a database behind the store's journal")
	reader := archiveread.New(restored.Pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	rec := reconcile.Reconciler{Journal: rj, Lifecycle: rlive.mgr, Orders: rlive.orders, Reader: reader, Schedules: rsch,
		Clocks: schedule.NewClocks(restored.Pool, w.key), Dispositions: rf, Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}
	_, err = rec.Run(w.ctx)
	require.NoError(t, err)
	_, err = rf.Freeze(w.ctx, 0, "ops:rita")
	require.ErrorIs(t, err, disposition.ErrNothingDue, "reconciled, the database knows the batch again: case 17 is disposed of")
	canaryInNoRow(t, w.ctx, restored.Pool)
	rw := &subjectWorld{world: &world{ctx: w.ctx}, key: w.key, reader: reader}
	bAfter, _ := rw.fetch(t, "case:18")
	require.Equal(t, ns(t, bBefore), ns(t, bAfter))
	vr, err := reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, vr.Failed, "%+v", vr)
	rep, err := rec.Run(w.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Reapplied)
	w.canaryNowhere(t)
}
