package lifecycle_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/reconcile"
	"github.com/craig/retention/kernel/schedule"
)

// dueSchedule: CW-12 keeps rule_evaluations a year after the later of the
// record and the case's closure; CW-12U keeps an unsubstantiated case's
// thirty days after its closure.
const dueSchedule = `version: "2026-12"
items:
  - id: CW-12
    series: rule_evaluations
    starts: [record, case.closed]
    retain: P1Y
    authority: GRS-2482, authorized 1998-03-20
  - id: CW-12U
    series: rule_evaluations
    when: {classification: Unsubstantiated}
    starts: case.closed
    retain: P30D
    authority: Missouri CW manual 2.5
`

// TestDueListsEachCaseOnItsOwnDate: on the order world (A = case 17 and B
// = case 18 sharing four archives and the hot table), nothing is due until
// a schedule is in force and a case's clock says so; B closed as
// unsubstantiated 60 days ago is due under CW-12U with all its rows, hot
// and archived, and the archives that hold them; A closed long ago is not
// due while its newest record is younger than a year; merged into B, A
// follows B's clock; reopened, B is due no more; a subject hold on B is
// reported with it; an archive not yet indexed by case keeps its cases
// off the listing and says so.
func TestDueListsEachCaseOnItsOwnDate(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	sch := schedule.New(w.db.Pool, []schedule.Series{{Table: "rule_evaluations"}})
	f := disposition.NewFinder(w.db.Pool, w.key, []archive.TableSpec{subjectSpec()}, sch)
	clocks := schedule.NewClocks(w.db.Pool, w.key)
	now := time.Now().UTC()
	event := func(typ, c string, daysAgo int, class string, into string) {
		t.Helper()
		e := schedule.Event{Type: typ, Case: mustSubject(t, c), At: now.AddDate(0, 0, -daysAgo), Classification: class}
		if into != "" {
			e.Into = mustSubject(t, into)
		}
		_, err := clocks.Apply(w.ctx, e, "ops:test")
		require.NoError(t, err)
	}
	_, err := f.Find(w.ctx, now, 0)
	require.ErrorIs(t, err, disposition.ErrNoSchedule)
	doc, err := schedule.Parse([]byte(dueSchedule), sch.Series())
	require.NoError(t, err)
	_, err = sch.Propose(w.ctx, doc, "ops:alice")
	require.NoError(t, err)
	_, err = sch.Approve(w.ctx, "2026-12", "ops:bob", true)
	require.NoError(t, err)

	due, err := f.Find(w.ctx, now, 0)
	require.NoError(t, err)
	require.Empty(t, due.Items, "no clock: CW-12 waits for a closure, so nothing is due")

	event(schedule.EventClosed, "case:18", 60, "UNSUBSTANTIATED", "")
	event(schedule.EventClosed, "case:17", 800, "substantiated", "")
	due, err = f.Find(w.ctx, now, 4)
	require.NoError(t, err)
	require.Empty(t, due.Items, "B's archives are not indexed by case yet: they may hold newer rows of it")

	rep, err := w.reader.IndexCaseRows(w.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 4, rep.Indexed)
	require.Zero(t, rep.Left)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_cases WHERE strpos(subject_box::text, 'case') > 0`), "sealed, never in clear")
	due, err = f.Find(w.ctx, now, rep.Left)
	require.NoError(t, err)
	require.Len(t, due.Items, 1)
	require.Equal(t, "CW-12U", due.Items[0].Item)
	require.Equal(t, "Missouri CW manual 2.5", due.Items[0].Authority)
	require.Len(t, due.Items[0].Cases, 1)
	b := due.Items[0].Cases[0]
	require.Equal(t, "case:18", b.Subject)
	require.Equal(t, int64(1), b.RowsHot)
	require.Equal(t, now.AddDate(0, 0, -30).Format(time.DateOnly), b.Due)
	require.Equal(t, int64(12), b.RowsArchived)
	require.ElementsMatch(t, []uuid.UUID{w.arch[0], w.arch[1], w.arch[3]}, b.Archives)
	require.Empty(t, b.Holds)
	require.Equal(t, int64(13), due.Items[0].Rows)

	// Merged into B, A follows B's clock and item, with every row of A.
	event(schedule.EventMerged, "case:17", 5, "", "case:18")
	due, err = f.Find(w.ctx, now, 0)
	require.NoError(t, err)
	require.Len(t, due.Items[0].Cases, 2)
	a := due.Items[0].Cases[0]
	if a.Subject != "case:17" {
		a = due.Items[0].Cases[1]
	}
	require.Equal(t, "case:17", a.Subject)
	require.Equal(t, int64(2), a.RowsHot)
	require.Equal(t, int64(8), a.RowsArchived)

	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "fair hearing", Reason: "hearing 2026-114", Subjects: []string{"case:18"}}, "ops:carol")
	require.NoError(t, err)
	due, err = f.Find(w.ctx, now, 0)
	require.NoError(t, err)
	for _, c := range due.Items[0].Cases {
		require.Equal(t, []uuid.UUID{h.ID}, c.Holds, "%s: B's hold keeps the archives A shares with it", c.Subject)
	}

	// Reopened, B (and A with it) is due no more; one day before B's due
	// date, neither is.
	due, err = f.Find(w.ctx, now.AddDate(0, 0, -31), 0)
	require.NoError(t, err)
	require.Empty(t, due.Items)
	event(schedule.EventReopened, "case:18", 1, "", "")
	due, err = f.Find(w.ctx, now, 0)
	require.NoError(t, err)
	require.Empty(t, due.Items)
}

// TestAnExpungedCaseLeavesNoClockAndNoCaseRows: expunging a case whose
// archives were indexed by case, whose clock moved and into which another
// case merged leaves its keyed hash nowhere: not in the case rows (nor its
// sealed spelling), not in the clocks, not in the accepted events; the
// other case's merger now points at the order's commitment.
func TestAnExpungedCaseLeavesNoClockAndNoCaseRows(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	clocks := schedule.NewClocks(w.db.Pool, w.key)
	now := time.Now().UTC()
	for _, e := range []schedule.Event{
		{Type: schedule.EventClosed, Case: mustSubject(t, "case:17"), At: now.AddDate(-1, 0, 0), Classification: "substantiated"},
		{Type: schedule.EventMerged, Case: mustSubject(t, "case:18"), At: now.AddDate(0, 0, -3), Into: mustSubject(t, "case:17")},
	} {
		_, err := clocks.Apply(w.ctx, e, "ops:test")
		require.NoError(t, err)
	}
	_, err := w.reader.IndexCaseRows(w.ctx, 10)
	require.NoError(t, err)
	hash := w.key.Hash(mustSubject(t, "case:17"))
	require.Equal(t, int64(3), w.db.Count(t, `SELECT count(*) FROM archive_cases WHERE subject_hash = $1`, hash))
	_, err = w.db.Pool.Exec(w.ctx, `UPDATE case_clock_events SET source = 'x'`)
	require.ErrorContains(t, err, "insert-only", "no bypass outside an expungement")
	_, err = w.db.Pool.Exec(w.ctx, `DELETE FROM case_clock_events`)
	require.ErrorContains(t, err, "insert-only")

	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "ORDER-2026-17", "sealed by the court", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	for _, q := range []string{
		`SELECT count(*) FROM archive_cases WHERE subject_hash = $1`,
		`SELECT count(*) FROM case_clocks WHERE subject_hash = $1 OR merged_into = $1`,
		`SELECT count(*) FROM case_clock_events WHERE subject_hash = $1 OR merged_into = $1`,
	} {
		require.Zero(t, w.db.Count(t, q, hash), q)
	}
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM case_clocks WHERE state = 'merged' AND merged_into IS NOT NULL`))
	rep, err := w.reader.IndexCaseRows(w.ctx, 10)
	require.NoError(t, err)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_cases AS c JOIN archive_ledger AS l USING (archive_id) WHERE l.purged_at IS NOT NULL`),
		"the superseded archives' case rows are forgotten")
	require.Equal(t, 2, rep.Indexed, "the two successors (A3 held only A) are indexed")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_cases WHERE subject_hash = $1`, hash))
}

// TestARestoreKeepsTheScheduleAndTheClocks: after the backup, a schedule
// version that keeps rows longer is approved and a closed case is
// reopened. Restored from the backup, the database has the older version
// in force and the case closed: the journal says it is behind, and
// reconcile puts back the approval (at its time, so it is in force again)
// and the reopening; nothing is due that was not due before the restore.
func TestARestoreKeepsTheScheduleAndTheClocks(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	series := []schedule.Series{{Table: "rule_evaluations"}}
	sch := schedule.New(w.db.Pool, series).WithJournal(live.j)
	clocks := schedule.NewClocks(w.db.Pool, w.key).WithJournal(live.j)
	now := time.Now().UTC()
	short := `version: "v1"
items:
  - id: CW-1
    series: rule_evaluations
    starts: case.closed
    retain: P30D
    authority: agency policy 1
`
	approve := func(raw, version string) {
		t.Helper()
		doc, err := schedule.Parse([]byte(raw), series)
		require.NoError(t, err)
		_, err = sch.Propose(w.ctx, doc, "ops:alice")
		require.NoError(t, err)
		_, err = sch.Approve(w.ctx, version, "ops:bob", true)
		require.NoError(t, err)
	}
	approve(short, "v1")
	_, err := clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventClosed, Case: mustSubject(t, "case:18"), At: now.AddDate(0, 0, -90), Classification: "x"}, "ops:erin")
	require.NoError(t, err)
	backup := kerneltest.Backup(t, w.db)

	approve(strings.NewReplacer(`"v1"`, `"v2"`, "P30D", "P10Y").Replace(short), "v2")
	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventReopened, Case: mustSubject(t, "case:17"), At: now.AddDate(0, 0, -1)}, "ops:erin")
	require.NoError(t, err)
	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventReopened, Case: mustSubject(t, "case:18"), At: now.AddDate(0, 0, -1)}, "ops:erin")
	require.NoError(t, err)

	restored := kerneltest.Restore(t, backup)
	rsch := schedule.New(restored.Pool, series)
	v, err := rsch.InForce(w.ctx)
	require.NoError(t, err)
	require.Equal(t, "v1", v.Version, "the backup has the older version in force")
	rj := journal.New(restored.Pool, w.st, w.s3.Service, &journal.Gate{})
	st, err := rj.Compare(w.ctx)
	require.NoError(t, err)
	require.Len(t, st.Missing, 3, "the approval and two reopenings")
	_, err = schedule.NewClocks(restored.Pool, w.key).WithJournal(rj).Apply(w.ctx,
		schedule.Event{Type: schedule.EventClosed, Case: mustSubject(t, "case:19"), At: now, Classification: "x"}, "ops:erin")
	require.ErrorIs(t, err, journal.ErrBehind, "no clock moves while the database is behind")

	rep, err := reconcile.Reconciler{Journal: rj, Schedules: rsch, Clocks: schedule.NewClocks(restored.Pool, w.key),
		Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}.Run(w.ctx)
	require.NoError(t, err)
	require.Equal(t, map[journal.Act]int{journal.ActScheduleApproved: 1, journal.ActCaseEvent: 2}, rep.Acts)
	require.False(t, rep.After.Behind())
	v, err = rsch.InForce(w.ctx)
	require.NoError(t, err)
	require.Equal(t, "v2", v.Version)
	require.Equal(t, int64(2), count(t, w.ctx, restored.Pool, `SELECT count(*) FROM case_clocks WHERE state = 'reopened'`))
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM case_clocks WHERE subject_hash = $1`, w.key.Hash(mustSubject(t, "case:19"))))
	f := disposition.NewFinder(restored.Pool, w.key, []archive.TableSpec{subjectSpec()}, rsch)
	due, err := f.Find(w.ctx, now, 0)
	require.NoError(t, err)
	require.Empty(t, due.Items)
	rep, err = reconcile.Reconciler{Journal: rj, Schedules: rsch, Clocks: schedule.NewClocks(restored.Pool, w.key),
		Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}.Run(w.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Reapplied, "a second run changes nothing")
}
