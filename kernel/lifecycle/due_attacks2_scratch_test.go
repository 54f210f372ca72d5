package lifecycle_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/reconcile"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
)

// h2Clocks renders every case clock of pool's database, sorted.
func h2Clocks(t *testing.T, ctx context.Context, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT encode(subject_hash, 'hex'), state, coalesce(closed_at::text, '-'), coalesce(classification, '-'),
		coalesce(encode(merged_into, 'hex'), '-'), changed_at::text FROM case_clocks ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a, b, c, d, e, f string
		require.NoError(t, rows.Scan(&a, &b, &c, &d, &e, &f))
		out = append(out, strings.Join([]string{a[:8], b, c, d, e, f}, " "))
	}
	require.NoError(t, rows.Err())
	return out
}

// TestAttack2ApprovalOnARestoredDatabaseShadowsAJournaledReopening: after
// the backup, case 18 (closed 90 days ago, due under v1 = P30D after the
// closure) is reopened on the live database: journaled as entry N. On the
// database restored from the backup, a schedule approval is not refused
// (Schedules.Approve never asks journal.Check): it takes entry N for
// itself. reconcile then sees N "in the database" and never re-applies the
// reopening: the restored clock stays closed, case 18 is listed as due on
// the restored database while it is reopened on the live one.
func TestAttack2ApprovalOnARestoredDatabaseShadowsAJournaledReopening(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	series := []schedule.Series{{Table: "rule_evaluations"}}
	sch := schedule.New(w.db.Pool, series).WithJournal(live.j)
	clocks := schedule.NewClocks(w.db.Pool, w.key).WithJournal(live.j)
	now := time.Now().UTC()
	doc := func(version, retain string) schedule.Document {
		d, err := schedule.Parse([]byte(fmt.Sprintf(`version: %q
items:
  - id: CW-1
    series: rule_evaluations
    starts: case.closed
    retain: %s
    authority: agency policy 1
`, version, retain)), series)
		require.NoError(t, err)
		return d
	}
	_, err := sch.Propose(w.ctx, doc("v1", "P30D"), "ops:alice")
	require.NoError(t, err)
	_, err = sch.Approve(w.ctx, "v1", "ops:bob", true)
	require.NoError(t, err)
	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventClosed, Case: mustSubject(t, "case:18"), At: now.AddDate(0, 0, -90), Classification: "x"}, "ops:erin")
	require.NoError(t, err)
	// A proposal the restored database will hold too.
	_, err = sch.Propose(w.ctx, doc("v2", "P31D"), "ops:alice")
	require.NoError(t, err)
	_, err = w.reader.IndexCaseRows(w.ctx, 10)
	require.NoError(t, err)
	backup := kerneltest.Backup(t, w.db)

	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventReopened, Case: mustSubject(t, "case:18"), At: now.AddDate(0, 0, -1)}, "ops:erin")
	require.NoError(t, err)

	restored := kerneltest.Restore(t, backup)
	rj := journal.New(restored.Pool, w.st, w.s3.Service, &journal.Gate{})
	st, err := rj.Compare(w.ctx)
	require.NoError(t, err)
	require.True(t, st.Behind())
	rsch := schedule.New(restored.Pool, series).WithJournal(rj)
	_, err = rsch.Approve(w.ctx, "v2", "ops:bob", true)
	assert.ErrorIs(t, err, journal.ErrBehind, "an approval on a database behind the store's journal must be refused (got %v)", err)

	rep, err := reconcile.Reconciler{Journal: rj, Schedules: rsch, Clocks: schedule.NewClocks(restored.Pool, w.key),
		Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}.Run(w.ctx)
	t.Logf("reconcile: err=%v acts=%v before=%+v after=%+v", err, rep.Acts, rep.Before, rep.After)
	assert.Equal(t, h2Clocks(t, w.ctx, w.db.Pool), h2Clocks(t, w.ctx, restored.Pool), "after reconcile every clock equals the live database's")
	f := disposition.NewFinder(restored.Pool, w.key, []archive.TableSpec{subjectSpec()}, rsch)
	due, err := f.Find(w.ctx, now, 0)
	require.NoError(t, err)
	var listed []string
	for _, it := range due.Items {
		for _, c := range it.Cases {
			listed = append(listed, c.Subject+"@"+c.Due)
		}
	}
	assert.Empty(t, listed, "case 18 is reopened on the live database: never due")
	_ = subject.Case
}

// TestAttack2RowWithAnUnreadableSecondCaseIsListed: with both case
// fields declared (case_id and other_case_id, each with its Field), a hot
// row about case 18 (closed unsubstantiated 60 days ago: due) whose
// other_case_id is "１７" (a case no expression reads: never due, as
// caseDaysSQL's own comment says) is listed as due with case 18:
// readCaseRows drops the unparsed flag as soon as one case parsed.
func TestAttack2RowWithAnUnreadableSecondCaseIsListed(t *testing.T) {
	t.Parallel()
	spec := twoCaseSpec()
	spec.Subjects[0].Field = "input ->> 'case_id'"
	spec.Subjects[1].Field = "input ->> 'other_case_id'"
	h := newAttackDue(t, hostileCW12U, spec)
	h.index(t)
	h.w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '20 days', 'r', '{"case_id": 18, "other_case_id": "１７", "n": 500}', '{}')`)
	h.event(t, schedule.EventClosed, "case:18", h.now.AddDate(0, 0, -60), "Unsubstantiated", "")
	due, err := h.f.Find(h.w.ctx, h.now, h.unindexed(t))
	require.NoError(t, err)
	b := caseOf(due, "case:18")
	require.NotNil(t, b, "case 18's own rows are due")
	// Case 18 has one hot row of its own (10 days old) and the shared one.
	require.Equal(t, int64(1), b.RowsHot, "the row also about an unreadable case (never due) is listed as due with case 18")
}

// h2HashLeft counts the places the keyed hash is left in (guarantee 5).
func h2HashLeft(t *testing.T, ctx context.Context, pool *pgxpool.Pool, hash []byte) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for name, q := range map[string]string{
		"case_clocks":            `SELECT count(*) FROM case_clocks WHERE subject_hash = $1 OR merged_into = $1`,
		"case_clock_events":      `SELECT count(*) FROM case_clock_events WHERE subject_hash = $1 OR merged_into = $1`,
		"archive_cases":          `SELECT count(*) FROM archive_cases WHERE subject_hash = $1 OR $1 = ANY (retention_hashes(others))`,
		"disposition_cases":      `SELECT count(*) FROM disposition_cases WHERE subject_hash = $1`,
		"disposition_extensions": `SELECT count(*) FROM disposition_extensions WHERE subject_hash = $1`,
	} {
		if n := count(t, ctx, pool, q, hash); n > 0 {
			out[name] = n
		}
	}
	return out
}

// TestAttack2ReconcileReappliesAnEventOfAnExpungedCase: after the backup
// case 17 is closed (journaled), then expunged by court order (journaled).
// Restored and reconciled, the database must hold case 17's keyed hash
// nowhere, as the live one does.
func TestAttack2ReconcileReappliesAnEventOfAnExpungedCase(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	series := []schedule.Series{{Table: "rule_evaluations"}}
	clocks := schedule.NewClocks(w.db.Pool, w.key).WithJournal(live.j)
	now := time.Now().UTC()
	_, err := w.reader.IndexCaseRows(w.ctx, 10)
	require.NoError(t, err)
	backup := kerneltest.Backup(t, w.db)

	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventClosed, Case: mustSubject(t, "case:17"), At: now.AddDate(0, 0, -3), Classification: "x"}, "ops:erin")
	require.NoError(t, err)
	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventMerged, Case: mustSubject(t, "case:18"), At: now.AddDate(0, 0, -2), Into: mustSubject(t, "case:17")}, "ops:erin")
	require.NoError(t, err)
	req, err := live.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "ORDER-2026-17", "sealed by the court", nil, "ops:alice")
	require.NoError(t, err)
	_, err = live.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	hash := w.key.Hash(mustSubject(t, "case:17"))
	require.Empty(t, h2HashLeft(t, w.ctx, w.db.Pool, hash), "live: nowhere")

	restored := kerneltest.Restore(t, backup)
	r := w.journaled(t, restored.Pool)
	rep, err := reconcile.Reconciler{Journal: r.j, Lifecycle: r.mgr, Orders: r.orders, Schedules: schedule.New(restored.Pool, series),
		Clocks: schedule.NewClocks(restored.Pool, w.key), Logger: slog.New(&kerneltest.LogRecorder{}), Actor: "cli:reconcile"}.Run(w.ctx)
	require.NoError(t, err)
	t.Logf("acts %v", rep.Acts)
	assert.Empty(t, h2HashLeft(t, w.ctx, restored.Pool, hash), "restored and reconciled: case 17's keyed hash nowhere")
	assert.Equal(t, h2Clocks(t, w.ctx, w.db.Pool), h2Clocks(t, w.ctx, restored.Pool), "every clock equals the live database's")
}

// TestAttack2EventAfterAnExpungementStartsANewClock: once case 17 is
// expunged, its clock and events are under the order's commitment, which
// nothing links to the case. A later event about it (a reopening, a merger
// into it) is applied as the first event of a new clock: refusing it would
// need a record that case 17 was expunged, which the order erased on
// purpose. The old clock and its events stay unlinked: only the new
// events carry case 17's keyed hash.
func TestAttack2EventAfterAnExpungementStartsANewClock(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	clocks := schedule.NewClocks(w.db.Pool, w.key)
	now := time.Now().UTC()
	_, err := clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventClosed, Case: mustSubject(t, "case:17"), At: now.AddDate(0, 0, -30), Classification: "x"}, "ops:erin")
	require.NoError(t, err)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "ORDER-2026-17", "sealed by the court", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	hash := w.key.Hash(mustSubject(t, "case:17"))
	require.Empty(t, h2HashLeft(t, w.ctx, w.db.Pool, hash))

	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventReopened, Case: mustSubject(t, "case:17"), At: now.Add(-time.Minute)}, "event:craig-cases")
	require.NoError(t, err)
	_, err = clocks.Apply(w.ctx, schedule.Event{Type: schedule.EventMerged, Case: mustSubject(t, "case:18"), At: now.Add(-time.Minute), Into: mustSubject(t, "case:17")}, "event:craig-cases")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"case_clock_events": 2, "case_clocks": 2}, h2HashLeft(t, w.ctx, w.db.Pool, hash),
		"the new clock of case 17 and case 18's merger into it; nothing of the expunged clock")
	require.Equal(t, int64(1), count(t, w.ctx, w.db.Pool, `SELECT count(*) FROM case_clock_events WHERE subject_hash = $1 AND type = 'case.reopened'`, hash))
	require.Zero(t, count(t, w.ctx, w.db.Pool, `SELECT count(*) FROM case_clock_events WHERE subject_hash = $1 AND type = 'case.closed'`, hash),
		"the closure before the expungement is not case 17's any more")
}

// TestAttack2HoldPlacedWhileABatchIsFrozen: a subject hold on case 18
// placed while a freeze is under way (the window widened by an EXCLUSIVE
// lock on dispositions, so the freeze waits at its INSERT, after its
// listing) waits for the batch: the batch took case 18 before the hold was
// in force, never while it was; a freeze after the hold leaves it out.
func TestAttack2HoldPlacedWhileABatchIsFrozen(t *testing.T) {
	t.Parallel()
	h := newAttackDue(t, hostileCW12U)
	h.index(t)
	h.event(t, schedule.EventClosed, "case:18", h.now.AddDate(0, 0, -60), "Unsubstantiated", "")
	due, err := h.f.Find(h.w.ctx, h.now, 0)
	require.NoError(t, err)
	require.NotNil(t, caseOf(due, "case:18"))

	blocker, err := h.w.db.Pool.Begin(h.w.ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(h.w.ctx, `LOCK TABLE dispositions IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	type res struct {
		b   disposition.Batch
		err error
	}
	done := make(chan res, 1)
	go func() {
		b, err := h.f.Freeze(h.w.ctx, 0, "ops:rita")
		done <- res{b, err}
	}()
	// Wait until the freeze waits on the table lock (its listing done).
	require.Eventually(t, func() bool {
		return count(t, h.w.ctx, h.w.db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%INSERT INTO dispositions%'`) > 0
	}, 20*time.Second, 50*time.Millisecond)
	// The hold is placed while the freeze is under way: it waits for the
	// batch (holds are ordered with freezes), so the batch either left the
	// case out or committed before the hold was in force.
	placed := make(chan error, 1)
	go func() {
		_, err := h.w.mgr.PlaceHold(h.w.ctx, lifecycleHold("case:18"), "ops:carol")
		placed <- err
	}()
	require.Eventually(t, func() bool {
		return count(t, h.w.ctx, h.w.db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'`) > 0
	}, 20*time.Second, 50*time.Millisecond, "the hold's placement waits for the freeze")
	require.NoError(t, blocker.Rollback(h.w.ctx))
	r := <-done
	require.NoError(t, <-placed)
	require.NoError(t, r.err)
	var proposed, holdAt time.Time
	require.NoError(t, h.w.db.Pool.QueryRow(h.w.ctx, `SELECT proposed_at FROM dispositions WHERE disposition_id = $1`, r.b.ID).Scan(&proposed))
	require.NoError(t, h.w.db.Pool.QueryRow(h.w.ctx, `SELECT created_at FROM archive_holds`).Scan(&holdAt))
	for _, it := range r.b.Items {
		for _, c := range it.Cases {
			if c.Subject == "case:18" {
				assert.True(t, holdAt.After(proposed), "batch %s took case 18 while its hold (placed %s) was in force (batch %s)", r.b.ID, holdAt, proposed)
			}
		}
	}
	// A freeze after the hold leaves the case out.
	_, err = h.w.db.Pool.Exec(h.w.ctx, `UPDATE dispositions SET status = 'rejected', rejected_by = 'ops:t', rejected_at = now(), reject_reason = 'r'`)
	require.NoError(t, err)
	b, err := h.f.Freeze(h.w.ctx, 0, "ops:rita")
	if err == nil {
		for _, it := range b.Items {
			for _, c := range it.Cases {
				assert.NotEqual(t, "case:18", c.Subject, "a freeze after the hold takes no held case")
			}
		}
	} else {
		require.ErrorIs(t, err, disposition.ErrNothingDue)
	}
}

func lifecycleHold(s string) lifecycle.HoldRequest {
	return lifecycle.HoldRequest{Title: "hearing", Reason: "hearing on " + s, Subjects: []string{s}}
}
