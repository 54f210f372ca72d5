package lifecycle_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/intent"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/reconcile"
)

type ledgerArchive struct {
	ID         uuid.UUID
	Supersedes *uuid.UUID
	Retention  *string
	LegalHold  bool
}

func restoredLedger(t *testing.T, ctx context.Context, pool *pgxpool.Pool) []ledgerArchive {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT archive_id, supersedes, retention_until::text, legal_hold FROM archive_ledger WHERE purged_at IS NULL ORDER BY archive_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ledgerArchive])
	require.NoError(t, err)
	return out
}

func holdArchives(t *testing.T, ctx context.Context, pool *pgxpool.Pool, id uuid.UUID) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT archive_ids FROM archive_holds WHERE id = $1`, id).Scan(&ids))
	return ids
}

func deepVerify(t *testing.T, ctx context.Context, w *orderWorld, pool *pgxpool.Pool) archiveread.Report {
	t.Helper()
	reader := archiveread.New(pool, w.st, w.s3.Service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(w.key)
	vr, err := reader.Verify(ctx, true, 0)
	require.NoError(t, err)
	return vr
}

// cancelOnReapplied cancels a context when the reconcile logs its n-th
// re-applied entry: a reconcile interrupted half way (SIGTERM, timeout).
type cancelOnReapplied struct {
	mu     *sync.Mutex
	seen   *int
	n      int
	cancel context.CancelFunc
}

func (h cancelOnReapplied) Enabled(context.Context, slog.Level) bool { return true }
func (h cancelOnReapplied) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "journal entry re-applied" {
		h.mu.Lock()
		*h.seen++
		if *h.seen == h.n {
			h.cancel()
		}
		h.mu.Unlock()
	}
	return nil
}
func (h cancelOnReapplied) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h cancelOnReapplied) WithGroup(string) slog.Handler      { return h }

// chainWorld: rows of cases 17, 18, 19 in one mixed archive (with
// a retention date of its own, held by id) and one more; backup; then
// case 17 and case 18 expunged (the second rewrites the first's successor).
func chainWorld(t *testing.T) (*orderWorld, journaled, string, uuid.UUID, uuid.UUID) {
	w := newOrderWorld(t)
	for n, c := range []int{17, 18, 19, 17, 18, 19} {
		note := "b"
		if c == 17 {
			note = canary
		}
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '300 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', $2::int, 'n', 700 + $1, 'note', $3::text), '{}')`, n, c, note)
	}
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.Len(t, rep.Tables[0].Archives, 2)
	mixed := rep.Tables[0].Archives[0].ArchiveID
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = DATE '2031-03-05' WHERE archive_id = $1`, mixed)
	live := w.journaled(t, w.db.Pool)
	hold, err := live.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "mixed", Reason: "audit", ArchiveIDs: []uuid.UUID{mixed}}, "ops:carol")
	require.NoError(t, err)
	backup := kerneltest.Backup(t, w.db)
	for _, c := range []string{"case:17", "case:18"} {
		req, err := live.orders.RequestExpunge(w.ctx, mustSubject(t, c), "JV", "order", []uuid.UUID{hold.ID}, "ops:alice")
		require.NoError(t, err)
		_, err = live.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
		require.NoError(t, err, c)
	}
	return w, live, backup, mixed, hold.ID
}

// TestAnInterruptedReconcileOfAChainFinishes: two expungements after the backup,
// the second rewriting the first's successor. The reconcile is
// interrupted (its context cancelled) right after it re-applied the first
// entry, then run again to completion. Expected: the same ledger as the
// live one (lineage, retention 2031-03-05 on the last successor, the hold
// naming it), nothing orphaned, nothing failed.
func TestAnInterruptedReconcileOfAChainFinishes(t *testing.T) {
	t.Parallel()
	w, _, backup, _, holdID := chainWorld(t)
	want, wantHeld := restoredLedger(t, w.ctx, w.db.Pool), holdArchives(t, w.ctx, w.db.Pool, holdID)
	t.Logf("live ledger: %+v", want)

	restored := kerneltest.Restore(t, backup)
	back := w.journaled(t, restored.Pool)
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	seen := 0
	reader := archiveread.New(back.pool, back.mgrStore, back.service, []archive.TableSpec{subjectSpec()}).WithSubjectKey(back.key)
	rep, err := reconcile.Reconciler{Journal: back.j, Lifecycle: back.mgr, Orders: back.orders, Reader: reader,
		Logger: slog.New(cancelOnReapplied{mu: &sync.Mutex{}, seen: &seen, n: 1, cancel: cancel}), Actor: "cli:reconcile"}.Run(ctx)
	require.Error(t, err, "interrupted")
	t.Logf("first run: %v; reapplied %+v", err, rep.Reapplied)
	require.Len(t, rep.Reapplied, 1)

	rec := back.reconcileAll(t, w.ctx)
	t.Logf("second run reapplied %+v copies %+v", rec.Reapplied, rec.Copies)
	got := restoredLedger(t, w.ctx, restored.Pool)
	t.Logf("restored ledger: %+v", got)
	t.Logf("hot rows of case 19: live %d restored %d", count(t, w.ctx, w.db.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'case_id' = '19'`),
		count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'case_id' = '19'`))
	vr := deepVerify(t, w.ctx, w, restored.Pool)
	require.Zero(t, vr.Failed, "%+v", vr.Failures)
	require.Zero(t, vr.OrphanCount, "%v", vr.Orphans)
	canaryInNoRow(t, w.ctx, restored.Pool)
	require.Equal(t, wantHeld, holdArchives(t, w.ctx, restored.Pool, holdID), "the hold names the successors")
	require.Equal(t, want, got, "the live archives, their lineage, retention dates and holds")
}

// TestABackupMidExpungementKeepsTheSuccessor: the backup is taken while an
// expungement's successor is uploaded (its intent committed, its objects
// in the store) and not yet booked; the expungement then completes.
// Restored and reconciled, the successor is booked again. Expected: it
// stays booked and intact through the service's next sweep of upload
// intents (an archive pass runs one at its start).
func TestABackupMidExpungementKeepsTheSuccessor(t *testing.T) {
	t.Parallel()
	midExpungement(t, false)
}

// TestABackupMidExpungementKeepsTheHeldSuccessor: the same, the rewritten archive
// held by id (the order names the hold): its successor is held and
// object-locked. Expected: the sweep cannot destroy a held archive.
func TestABackupMidExpungementKeepsTheHeldSuccessor(t *testing.T) {
	t.Parallel()
	midExpungement(t, true)
}

func midExpungement(t *testing.T, held bool) {
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	var holds []uuid.UUID
	if held {
		h, err := live.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "a1", Reason: "audit", ArchiveIDs: []uuid.UUID{w.arch[0]}}, "ops:carol")
		require.NoError(t, err)
		holds = []uuid.UUID{h.ID}
	}
	req, err := live.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-17", "order", holds, "ops:alice")
	require.NoError(t, err)

	// Block bookings: hold the holds lock exclusive, as a hold placement does.
	blocker, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(w.ctx, `SELECT pg_advisory_xact_lock($1)`, lease.HoldsKey)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := live.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
		done <- err
	}()
	var keys []string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		rows, err := w.db.Pool.Query(w.ctx, `SELECT object_key FROM archive_upload_intents WHERE work = 'expungement' ORDER BY object_key`)
		require.NoError(t, err)
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		if len(keys) >= 2 {
			all := true
			for _, k := range keys {
				if n, err := w.st.VersionCount(w.ctx, k); err != nil || n == 0 {
					all = false
				}
			}
			if all {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.GreaterOrEqual(t, len(keys), 2, "a successor uploaded")
	backup := kerneltest.Backup(t, w.db)
	require.NoError(t, blocker.Commit(w.ctx))
	require.NoError(t, <-done)
	t.Logf("successor keys at the backup: %v", keys)
	require.Zero(t, deepVerify(t, w.ctx, w, w.db.Pool).Failed)

	restored := kerneltest.Restore(t, backup)
	back := w.journaled(t, restored.Pool)
	rec := back.reconcileAll(t, w.ctx)
	t.Logf("reapplied %+v copies %+v", rec.Reapplied, rec.Copies)
	vr := deepVerify(t, w.ctx, w, restored.Pool)
	require.Zero(t, vr.Failed, "after reconcile: %+v", vr.Failures)
	require.Zero(t, vr.OrphanCount, "%v", vr.Orphans)
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM archive_upload_intents`), "the successor booked again: its intents are cleared")

	// The service's next archive pass (or sweep) on the restored database.
	sw, err := intent.NewSweeper(restored.Pool, w.st, true, slog.New(w.logs), nil).Sweep(w.ctx)
	require.NoError(t, err)
	t.Logf("sweep: %+v", sw)
	vr = deepVerify(t, w.ctx, w, restored.Pool)
	t.Logf("live ledger %+v", restoredLedger(t, w.ctx, w.db.Pool))
	t.Logf("restored ledger %+v", restoredLedger(t, w.ctx, restored.Pool))
	require.Zero(t, vr.Failed, "after the next sweep, booked archives are intact: %+v", vr.Failures)
}

// TestASuccessorPurgedAfterTheBackupStaysPurged: after the backup case 17 is
// expunged (A1 {17,18,17,18,18} rewritten to A1' {18,18,18}), then A1' is
// purged (its retention date passed). Restored and reconciled: no row of
// A1' is hot again, no version of A1' is left, the live archives are the
// live database's, verify finds nothing wrong, a second run does nothing.
func TestASuccessorPurgedAfterTheBackupStaysPurged(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	backup := kerneltest.Backup(t, w.db)
	req, err := live.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-17", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = live.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	var succ uuid.UUID
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT superseded_by FROM archive_ledger WHERE archive_id = $1`, w.arch[0]).Scan(&succ))
	keys := w.ledgerKeys(t, succ)
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE archive_id = $1`, succ)
	pr, err := live.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Contains(t, pr.Purged, succ)
	want := restoredLedger(t, w.ctx, w.db.Pool)

	restored := kerneltest.Restore(t, backup)
	back := w.journaled(t, restored.Pool)
	rec := back.reconcileAll(t, w.ctx)
	t.Logf("reapplied %+v copies %+v", rec.Reapplied, rec.Copies)
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE (input ->> 'n')::int IN (2, 4, 5)`), "A1's case 18 rows were purged")
	for _, k := range keys {
		n, err := w.st.VersionCount(w.ctx, k)
		require.NoError(t, err)
		require.Zero(t, n, k)
	}
	canaryInNoRow(t, w.ctx, restored.Pool)
	vr := deepVerify(t, w.ctx, w, restored.Pool)
	require.Zero(t, vr.Failed, "%+v", vr.Failures)
	require.Zero(t, vr.OrphanCount, "%v", vr.Orphans)
	require.Equal(t, want, restoredLedger(t, w.ctx, restored.Pool))
	again := back.reconcileAll(t, w.ctx)
	require.Empty(t, again.Reapplied)
	require.Empty(t, again.Copies.Deleted)
}

// TestRowsArchivedAfterTheBackupExpungedTwiceStayHeld: after the backup, rows of
// cases 17, 18, 19 are written and archived (B: 17,18,19,17,18; C: 19), B
// is held by id, then case 17 and case 18 are expunged naming the hold
// (B -> B' -> B” {19}). Restored and reconciled. Expected (guarantee 3):
// the hold still covers every archive holding B's surviving rows (B”
// booked, held, object-locked), as in the live database; then a purge of
// everything whose retention passed must not destroy case 19's rows.
func TestRowsArchivedAfterTheBackupExpungedTwiceStayHeld(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	live := w.journaled(t, w.db.Pool)
	backup := kerneltest.Backup(t, w.db)
	for n, c := range []int{17, 18, 19, 17, 18, 19} {
		note := "late"
		if c == 17 {
			note = canary
		}
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '300 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', $2::int, 'n', 800 + $1, 'note', $3::text), '{}')`, n, c, note)
	}
	var rowID uuid.UUID // B's case-19 row (n=802): in B'' on the live database
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT id FROM rule_evaluations WHERE input ->> 'n' = '802'`).Scan(&rowID))
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.Len(t, rep.Tables[0].Archives, 2)
	b := rep.Tables[0].Archives[0].ArchiveID
	hold, err := live.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "b", Reason: "audit", ArchiveIDs: []uuid.UUID{b}}, "ops:carol")
	require.NoError(t, err)
	for _, c := range []string{"case:17", "case:18"} {
		req, err := live.orders.RequestExpunge(w.ctx, mustSubject(t, c), "JV", "order", []uuid.UUID{hold.ID}, "ops:alice")
		require.NoError(t, err)
		_, err = live.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
		require.NoError(t, err, c)
	}
	want, wantHeld := restoredLedger(t, w.ctx, w.db.Pool), holdArchives(t, w.ctx, w.db.Pool, hold.ID)
	t.Logf("live ledger %+v held %v", want, wantHeld)

	restored := kerneltest.Restore(t, backup)
	back := w.journaled(t, restored.Pool)
	rec := back.reconcileAll(t, w.ctx)
	t.Logf("reapplied %+v copies %+v", rec.Reapplied, rec.Copies)
	got, gotHeld := restoredLedger(t, w.ctx, restored.Pool), holdArchives(t, w.ctx, restored.Pool, hold.ID)
	t.Logf("restored ledger %+v held %v", got, gotHeld)
	hot19 := count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'late' AND input ->> 'case_id' = '19'`)
	t.Logf("case 19 late rows hot after reconcile: %d (live: %d)", hot19, count(t, w.ctx, w.db.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'late'`))
	canaryInNoRow(t, w.ctx, restored.Pool)
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'late' AND input ->> 'case_id' = '18'`), "case 18 expunged")
	vr := deepVerify(t, w.ctx, w, restored.Pool)
	require.Zero(t, vr.Failed, "%+v", vr.Failures)
	require.Zero(t, vr.OrphanCount, "%v", vr.Orphans)

	successors := func(as []ledgerArchive) []ledgerArchive {
		var out []ledgerArchive
		for _, a := range as {
			if a.Supersedes != nil {
				out = append(out, a)
			}
		}
		return out
	}
	// C, the pass's other archive (booked after the backup, named by no
	// act), is put back hot and archived again by the next pass (ADR-070).
	require.Equal(t, successors(want), successors(got), "the successor of B is booked again as live: held, with its retention date")
	require.Equal(t, int64(1), hot19, "the case-19 row of C is hot again; that of B stays archived")
	require.Zero(t, count(t, w.ctx, restored.Pool, `SELECT count(*) FROM rule_evaluations WHERE id = $1`, rowID), "the case-19 row of B is not hot")
	survives := func(pool *pgxpool.Pool) bool {
		if count(t, w.ctx, pool, `SELECT count(*) FROM rule_evaluations WHERE id = $1`, rowID) > 0 {
			return true
		}
		rows, err := pool.Query(w.ctx, `SELECT data_key FROM archive_ledger WHERE purged_at IS NULL`)
		require.NoError(t, err)
		ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, k := range ks {
			d, err := w.st.Get(w.ctx, k)
			if err == nil && strings.Contains(string(d), rowID.String()) {
				return true
			}
		}
		return false
	}
	// (The live database booked B'' held with legal_hold=true; reconcile
	// destroyed B''s object-locked objects and put its row back hot.)
	// Consequence: the next pass archives the put-back rows, then a purge
	// of what is due (live, B'' is held: never purgeable while the hold is
	// active).
	eng := archiveEngine(t, w, restored.Pool, back)
	_, err = eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	restored.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE purged_at IS NULL`)
	pr, err := back.mgr.Purge(w.ctx, 100, false, "ops:alice")
	require.NoError(t, err)
	t.Logf("purged on the restored database: %v", pr.Purged)
	t.Logf("held by the hold after reconcile: %v; live: %v", gotHeld, wantHeld)
	require.True(t, survives(restored.Pool), "restored: the active hold keeps case 19's row of B")
	require.Equal(t, wantHeld, gotHeld, "the hold names B's successors, as live")
}

func archiveEngine(t *testing.T, w *orderWorld, pool *pgxpool.Pool, back journaled) *archive.Engine {
	t.Helper()
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	eng, err := archive.New(pool, w.st, []archive.TableSpec{subjectSpec()}, archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: 5, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true,
			SubjectKey: w.key, Journal: back.j}, slog.New(w.logs), am)
	require.NoError(t, err)
	return eng
}
