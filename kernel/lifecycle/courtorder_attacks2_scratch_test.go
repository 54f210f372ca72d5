package lifecycle_test

// Attacks on court orders (ADR-067), each a guarantee the orders hold to.

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/subject"
)

// X1: a HOT row about A and C (two declared subjects); C is under a
// subject hold the order does not name. A's expungement must be refused
// (409 held) — the row is also C's, and C's hold keeps it.
func TestOrderAttack2HotJointRowUnderOtherSubjectsHold(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	two := subjectSpec()
	two.Subjects = append(two.Subjects, archiveSubject("retention_subject('case', input ->> 'other_case')"))
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '5 days', 'r', jsonb_build_object('case_id', 77, 'other_case', 17, 'note', 'joint-evidence'), '{}')`)
	mgr, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: []string{"rule_evaluations"},
		SubjectKey: w.key, SubjectTables: []string{"rule_evaluations"}}, slogNew(w.logs), w.m)
	require.NoError(t, err)
	h, err := mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "case 77 litigation", Reason: "subpoena", Subjects: []string{"case:77"}}, "ops:carol")
	require.NoError(t, err)
	orders, err := courtorder.New(w.db.Pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archiveTableSpec{two}, Key: w.key,
		ObjectLock: true, Bookkeep: bookkeeper()}, slogNew(w.logs))
	require.NoError(t, err)
	req, err := orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	var held *courtorder.HeldError
	if errors.As(err, &held) {
		return // held
	}
	require.NoError(t, err)
	_, err = orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	if errors.As(err, &held) {
		t.Errorf("FINDING (partial): request accepted, approval refused: %v", err)
		return
	}
	require.NoError(t, err)
	n := w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = 'joint-evidence'`)
	t.Errorf("FINDING: hold %s on case:77 did not block A's expungement; C's held hot row deleted (left: %d)", h.ID, n)
}

// X2: after A's expungement, a hold placed by archive id on the OLD
// (superseded) archive: accepted? does it hold the successor (the rows
// the operator meant to keep)?
func TestOrderAttack2HoldOnSupersededArchive(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	var succ uuid.UUID
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT archive_id FROM archive_ledger WHERE supersedes = $1`, w.arch[0]).Scan(&succ))
	_, err = w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "A1 evidence", Reason: "subpoena for archive A1", ArchiveIDs: []uuid.UUID{w.arch[0]}}, "ops:carol")
	require.ErrorIs(t, err, lifecycle.ErrHeldPurged, "a superseded archive is gone: hold its successor %s", succ)
}

// X3: the successor keeps the OLD archive's retention date even when the
// service's bookkeeping schedules new archives (as kernel/app does), and
// is not purged before it.
func TestOrderAttack2SuccessorRetention(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	scheduled := func(ctx context.Context, tx pgx.Tx, m archive.Manifest, by string) error {
		if err := bookkeeper()(ctx, tx, m, by); err != nil {
			return err
		}
		return lifecycle.ScheduleRetention(ctx, tx, m.ArchiveID, 1) // would be due already
	}
	orders, err := courtorder.New(w.db.Pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archiveTableSpec{subjectSpec()}, Key: w.key,
		ObjectLock: true, Bookkeep: scheduled}, slogNew(w.logs))
	require.NoError(t, err)
	far := time.Now().UTC().AddDate(3, 0, 0).Truncate(24 * time.Hour)
	require.NoError(t, w.mgr.SetRetention(w.ctx, w.arch[0], far, "ops:carol", true))
	// arch[3] stays undated
	req, err := orders.RequestExpunge(w.ctx, mustSubject(t, "CASE:0017"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	res, err := orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	salt, _ := hex.DecodeString(res.Salt)
	require.Equal(t, hex.EncodeToString(subject.Commitment(salt, mustSubject(t, "case:17"))), res.Commitment, "commitment over canonical subject")
	type pair struct {
		Old, New *time.Time
	}
	rows, err := w.db.Pool.Query(w.ctx, `SELECT o.retention_until::timestamptz, n.retention_until::timestamptz FROM archive_ledger n JOIN archive_ledger o ON o.archive_id = n.supersedes`)
	require.NoError(t, err)
	got := must(pgx.CollectRows(rows, pgx.RowToStructByPos[pair]))(t)
	require.Len(t, got, 2)
	for _, p := range got {
		if (p.Old == nil) != (p.New == nil) || (p.Old != nil && !p.Old.Equal(*p.New)) {
			t.Errorf("FINDING: successor retention %v != old %v", p.New, p.Old)
		}
	}
	pr, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, pr.Purged, "nothing due")
	// verify deep on successors; the certificate is no orphan
	rep, err := w.reader.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Zero(t, rep.Failed, "%+v", rep)
	require.Zero(t, rep.OrphanCount, "%v", rep.Orphans)
	for _, o := range rep.Orphans {
		require.False(t, strings.Contains(o, "expungements/"))
	}
	gc, err := w.reader.CollectOrphans(w.ctx, 1, true, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, gc.Orphans)
}

// X4: an approval while the archive lease is held elsewhere (a pass, a
// purge): refused already_running, nothing recorded (no approver, no
// salt), and the order runs afterwards.
func TestOrderAttack2ApproveWhileLeaseHeld(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	hold, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = lease.TryRun(w.ctx, w.db.Pool, lease.ArchiveKey, func(ctx context.Context, _ *pgx.Conn) error {
			close(hold)
			<-release
			return nil
		})
	}()
	<-hold
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.ErrorIs(t, err, courtorder.ErrAlreadyRunning)
	_, err = w.reader.CollectOrphans(w.ctx, 1, true, "ops:alice")
	require.Error(t, err, "gc waits too")
	close(release)
	require.Equal(t, courtorder.StatusAwaitingApproval, w.status(t, req.ExpungeID))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM expungements WHERE approved_by IS NOT NULL OR salt_box IS NOT NULL`))
	time.Sleep(100 * time.Millisecond)
	res, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	require.Equal(t, 3, res.Rewritten)
}

// X5: a sealed subject is expunged; its seal stays and rows of it written
// later stay hidden; the orders listing names it by keyed hash only.
func TestOrderAttack2SealOutlivesExpunge(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	a := mustSubject(t, "case:17")
	_, err := w.orders.Seal(w.ctx, a, "SEAL-1", "sealed", "ops:alice")
	require.NoError(t, err)
	req, err := w.orders.RequestExpunge(w.ctx, a, "JV-1", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '1 days', 'r', jsonb_build_object('case_id', 17, 'note', 'later-row'), '{}')`)
	rows, _ := w.fetch(t, "case:17")
	require.Empty(t, rows, "sealed still")
	l, err := w.orders.List(w.ctx)
	require.NoError(t, err)
	require.Len(t, l.Seals, 1)
	require.NotContains(t, l.Seals[0].SubjectHash, "case")
}
