package lifecycle_test

// What is destroyed stays destroyed, and what is held or sealed stays so:
// unbooked copies, holds named by an order, seals and their order references.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/intent"
	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
)

// TestHoldNamedByAnOrderKeepsHolding: a subject hold the expungement names
// does not block the order, and after it the hold still holds the
// subject: an archive booked later with the subject's new rows is held,
// and a purge of it answers as held (it destroyed the archive while the
// hold was active on main).
func TestHoldNamedByAnOrderKeepsHolding(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "case 17 hearing", Reason: "fair hearing", Subjects: []string{"case:17"}}, "ops:carol")
	require.NoError(t, err)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-9", "order names the hearing's hold", []uuid.UUID{h.ID}, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)

	// New rows about case 17 arrive after the order and age out.
	for n := 1; n <= 5; n++ {
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '300 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', 17, 'n', 200 + $1), '{}')`, n)
	}
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.Len(t, rep.Tables[0].Archives, 1)
	later := rep.Tables[0].Archives[0].ArchiveID

	var heldFlag bool
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT legal_hold FROM archive_ledger WHERE archive_id = $1`, later).Scan(&heldFlag))
	require.True(t, heldFlag, "the later archive of case 17 is booked held")
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE archive_id = $1`, later)
	pr, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.NotContains(t, pr.Purged, later, "the hold on case 17 is active: its later archive is not purged")
	require.Nil(t, w.purgedBy(t, later))
	holds, err := w.mgr.Holds(w.ctx)
	require.NoError(t, err)
	var found bool
	for _, x := range holds {
		if x.ID == h.ID {
			found = true
			require.Contains(t, x.Covers, later, "the hold lists the later archive among what it covers")
		}
	}
	require.True(t, found)
}

// orphanUpload leaves what a pass (or an order's rewrite) killed between
// its PUT and its booking leaves: an intent and the object, holding the
// rows of sql (a query of to_jsonb lines), no ledger row naming it.
func (w *orderWorld) orphanUpload(t *testing.T, work intent.Work, sql string) string {
	t.Helper()
	var doc string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, sql).Scan(&doc))
	require.Contains(t, doc, canary)
	id := uuid.Must(uuid.NewV7())
	keys, err := store.NewArchiveKeys(w.s3.Service, "rule_evaluations", time.Now(), id.String())
	require.NoError(t, err)
	require.NoError(t, intent.Record(w.ctx, w.db.Pool, work, id, "rule_evaluations", "system:retention", keys.Data, keys.Manifest))
	require.NoError(t, w.st.PutCreate(w.ctx, keys.Data, []byte(doc+"\n"), store.ContentTypeNDJSON))
	return keys.Data
}

// TestOrphansOfKilledWorkAreDestroyedBeforeAnOrder: objects holding the
// subject's rows that a pass and an earlier try of an order wrote and never
// booked (killed between the PUT and the commit) are destroyed, every
// version, before the expungement completes: no object version holds the
// canary afterwards (on main the orphans outlived the order).
func TestOrphansOfKilledWorkAreDestroyedBeforeAnOrder(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	hot := w.orphanUpload(t, intent.WorkArchive, `SELECT string_agg(to_jsonb(t)::text, E'\n') FROM rule_evaluations t WHERE input ->> 'note' = '`+canary+`'`)
	rewritten := w.orphanUpload(t, intent.WorkExpungement, `SELECT '{"id":"0190d2a0-0000-7000-8000-000000000001","input":{"case_id":17,"note":"`+canary+`"}}'`)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-3", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.ErrorIs(t, err, courtorder.ErrOrphans, "destroyed, but a late upload may still land: the order does not complete yet")
	// Once the late-upload window has passed (none here), it completes.
	orders, err := courtorder.New(w.db.Pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archive.TableSpec{subjectSpec()}, Key: w.key,
		ObjectLock: true, Bookkeep: archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		Orphans: intent.NewSweeper(w.db.Pool, w.st, true, slog.New(w.logs), nil).WithLateWindow(0)}, slog.New(w.logs))
	require.NoError(t, err)
	_, err = orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	for _, key := range []string{hot, rewritten} {
		n, err := w.st.VersionCount(w.ctx, key)
		require.NoError(t, err)
		require.Zero(t, n, "no version of the orphan %s is left", key)
	}
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_upload_intents`))
	w.canaryNowhere(t)
	destroyed := 0
	for _, r := range w.logs.Records() {
		if r.Message == "destroyed an orphan upload: its booking never committed (its rows are still hot or in another archive)" {
			destroyed++
		}
	}
	require.Equal(t, 4, destroyed, "each orphan's data and manifest intents are logged")
}

// TestAnOrphanLeftByACancelledPassIsDestroyedAndLogged: a pass cancelled
// while a batch is being booked (a client that gave up on POST
// /admin/archive/run) rolls the booking back; the pass destroys the
// batch's objects before it lets go of the lease, counts them and logs
// them (on main the objects stayed, unnamed, and nothing was logged).
func TestAnOrphanLeftByACancelledPassIsDestroyedAndLogged(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t) // its four archives are booked; 3 hot rows left
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '200 days', 'r', jsonb_build_object('case_id', 17, 'note', $1::text), '{}')`, canary)
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	giveUp := func(ctx context.Context, tx pgx.Tx, m archive.Manifest, by string) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}
	reg := prometheus.NewRegistry()
	am, err := metrics.NewArchive(reg)
	require.NoError(t, err)
	logs := &kerneltest.LogRecorder{}
	eng, err := archive.New(w.db.Pool, w.st, []archive.TableSpec{subjectSpec()}, giveUp,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: 5, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true, SubjectKey: w.key},
		slog.New(logs), am)
	require.NoError(t, err)
	if _, err = eng.RunPass(ctx, 10); err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
	require.Equal(t, int64(4), w.db.Count(t, `SELECT count(*) FROM rule_evaluations`), "the row stays hot")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_upload_intents WHERE destroyed_at IS NULL`), "every intent's object destroyed")
	var keys []string
	for _, r := range logs.Records() {
		if r.Message == "destroyed an orphan upload: its booking never committed (its rows are still hot or in another archive)" {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "key" {
					keys = append(keys, a.Value.String())
				}
				return true
			})
		}
	}
	require.Len(t, keys, 2, "data and manifest, each logged")
	for _, key := range keys {
		n, err := w.st.VersionCount(w.ctx, key)
		require.NoError(t, err)
		require.Zero(t, n, "no version of %s is left", key)
	}
	require.Equal(t, 2.0, testutil.ToFloat64(am.OrphansDestroyed.WithLabelValues("rule_evaluations")))
	require.Equal(t, int64(4), w.db.Count(t, `SELECT count(*) FROM archive_ledger`), "nothing booked")
}

// TestALateUploadOfAnOrphanIsDestroyedToo: a PUT a cancelled client sent
// can land after the sweep destroyed its key (a proxy held it): the intent
// stays through the late-upload window and every sweep destroys the key
// again, logging the late landing; only after the window is the intent
// deleted (on main the late object stayed, named by nothing).
func TestALateUploadOfAnOrphanIsDestroyedToo(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	logs := &kerneltest.LogRecorder{}
	sw := intent.NewSweeper(w.db.Pool, w.st, false, slog.New(logs), nil)
	key := "retention-archives/" + w.s3.Service + "/rule_evaluations/late.ndjson"
	require.NoError(t, intent.Record(w.ctx, w.db.Pool, intent.WorkArchive, uuid.Must(uuid.NewV7()), "rule_evaluations", "system:retention", key))
	rep, err := sw.Sweep(w.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{key}, rep.Destroyed, "destroyed before anything landed")
	n, err := sw.Pending(w.ctx, []string{"rule_evaluations"}, uuid.Nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "within the late-upload window the orphan may still exist")

	require.NoError(t, w.st.PutCreate(w.ctx, key, []byte("{}\n"), store.ContentTypeNDJSON)) // the late PUT lands
	rep, err = sw.Sweep(w.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{key}, rep.Destroyed)
	require.Empty(t, rep.Forgotten)
	versions, err := w.st.VersionCount(w.ctx, key)
	require.NoError(t, err)
	require.Zero(t, versions)
	late := 0
	for _, r := range logs.Records() {
		if r.Message == "destroyed a late upload of an orphan: it landed after the orphan was destroyed" {
			late++
		}
	}
	require.Equal(t, 1, late)

	rep, err = sw.WithLateWindow(0).Sweep(w.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{key}, rep.Forgotten, "past the window: destroyed once more, then forgotten")
	require.Empty(t, rep.Destroyed, "nothing landed since")
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_upload_intents`))
	err = pgx.BeginFunc(w.ctx, w.db.Pool, func(tx pgx.Tx) error { return intent.Clear(w.ctx, tx, key) })
	require.ErrorIs(t, err, intent.ErrSwept, "a swept upload is never booked")
}

// TestASweptIntentRollsItsBookingBack: the intent row arbitrates between a
// sweep and a booking: once a sweep destroyed an upload and deleted its
// intent, the booking's Clear fails with ErrSwept (it must not book
// objects that are gone); a booking that cleared first leaves the sweep
// nothing.
func TestASweptIntentRollsItsBookingBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	sw := intent.NewSweeper(w.db.Pool, w.st, false, slog.New(&kerneltest.LogRecorder{}), nil)
	key := "retention-archives/" + w.s3.Service + "/rule_evaluations/x.ndjson"
	require.NoError(t, intent.Record(w.ctx, w.db.Pool, intent.WorkArchive, uuid.Must(uuid.NewV7()), "rule_evaluations", "system:retention", key))
	require.NoError(t, w.st.PutCreate(w.ctx, key, []byte("{}\n"), store.ContentTypeNDJSON))
	rep, err := sw.Sweep(w.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{key}, rep.Destroyed)
	err = pgx.BeginFunc(w.ctx, w.db.Pool, func(tx pgx.Tx) error { return intent.Clear(w.ctx, tx, key) })
	require.ErrorIs(t, err, intent.ErrSwept)

	booked := "retention-archives/" + w.s3.Service + "/rule_evaluations/y.ndjson"
	require.NoError(t, intent.Record(w.ctx, w.db.Pool, intent.WorkArchive, uuid.Must(uuid.NewV7()), "rule_evaluations", "system:retention", booked))
	require.NoError(t, w.st.PutCreate(w.ctx, booked, []byte("{}\n"), store.ContentTypeNDJSON))
	require.NoError(t, pgx.BeginFunc(w.ctx, w.db.Pool, func(tx pgx.Tx) error { return intent.Clear(w.ctx, tx, booked) }))
	rep, err = sw.Sweep(w.ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Destroyed)
	require.True(t, w.exists(t, booked), "a booked object is never swept")
}

// TestASealOpensOnlyUnderItsOwnOrder: a sealed-access read names the order
// that sealed the subject: another order's reference (or an invented one)
// is refused with ErrOrderRef and reads nothing (on main any reference
// opened every seal), and a read under one order's reference still hides
// the subjects sealed under another. The seal's reason stays in the local
// lifecycle log: no staged event carries it (on main the seal and unseal
// events did).
func TestASealOpensOnlyUnderItsOwnOrder(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	const reason = "REASON-CANARY juvenile record"
	_, err := w.orders.Seal(w.ctx, mustSubject(t, "case:17"), "WIC-17", reason, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Seal(w.ctx, mustSubject(t, "case:18"), "WIC-18", reason, "ops:alice")
	require.NoError(t, err)

	var out bytes.Buffer
	for _, ref := range []string{"totally-made-up", "WIC-18"} {
		_, err = w.reader.WithSealedAccess(ref).Subject(w.ctx, &out, mustSubject(t, "case:17"), "ops:dana")
		require.ErrorIs(t, err, archiveread.ErrOrderRef, "%q does not open case:17's seal", ref)
	}
	_, err = w.reader.WithSealedAccess("totally-made-up").Range(w.ctx, &out, "rule_evaluations", time.Now().AddDate(-5, 0, 0), time.Now().Add(time.Hour), "ops:dana")
	require.ErrorIs(t, err, archiveread.ErrOrderRef)
	require.NotContains(t, out.String(), canary, "nothing was read")

	out.Reset()
	_, err = w.reader.WithSealedAccess(" wic-17 ").Subject(w.ctx, &out, mustSubject(t, "case:17"), "ops:dana")
	require.NoError(t, err, "the seal's own order, trimmed and in any letter case")
	require.Contains(t, out.String(), canary)
	out.Reset()
	_, err = w.reader.WithSealedAccess("WIC-17").Range(w.ctx, &out, "rule_evaluations", time.Now().AddDate(-5, 0, 0), time.Now().Add(time.Hour), "ops:dana")
	require.NoError(t, err)
	require.Contains(t, out.String(), canary, "case 17's rows under its order")
	require.NotContains(t, out.String(), `"case_id": 18`, "case 18 is sealed under another order: hidden")

	_, err = w.orders.Unseal(w.ctx, mustSubject(t, "case:18"), "WIC-18-LIFT", reason, "ops:alice")
	require.NoError(t, err)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE strpos(payload::text, 'REASON-CANARY') > 0`), "no event carries the reason")
	require.Equal(t, int64(3), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type LIKE '%.subject_%sealed'`))
	require.Equal(t, int64(3), w.db.Count(t, `SELECT count(*) FROM archive_lifecycle_log WHERE strpos(detail::text, 'REASON-CANARY') > 0`), "the local log keeps it")
}

// TestASealedSubjectAnswersHoldsAndOrdersAsAnUnknownOne: a hold placed on a
// sealed case answers as one on a case with no rows (no archive named in
// covers, on placement and in the listing), and so do an expungement's
// refusal, its request and the order listing (on main they named the
// sealed case's archives to a token with only archive:hold or
// archive:purge). The hold still holds them and the order still rewrites
// them.
func TestASealedSubjectAnswersHoldsAndOrdersAsAnUnknownOne(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	_, err := w.orders.Seal(w.ctx, mustSubject(t, "case:17"), "WIC-17", "sealed juvenile record", "ops:alice")
	require.NoError(t, err)
	sealed, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:17"}}, "ops:carol")
	require.NoError(t, err)
	unknown, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:4242"}}, "ops:carol")
	require.NoError(t, err)
	require.Equal(t, unknown.Covers, sealed.Covers, "a sealed case's hold answers as an unknown case's")
	require.Empty(t, sealed.Covers)
	all, err := w.mgr.Holds(w.ctx)
	require.NoError(t, err)
	for _, h := range all {
		require.Empty(t, h.Covers, "hold %s", h.ID)
	}
	require.Equal(t, int64(3), w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE legal_hold`), "the hold still holds case 17's three archives")
	recs, err := w.mgr.Records(w.ctx, lifecycle.Filter{})
	require.NoError(t, err)
	require.Len(t, recs, 4)
	for _, r := range recs {
		require.NotContains(t, r.Holds, sealed.ID, "the records listing does not name the sealed case's hold (it did on main)")
		require.False(t, r.LegalHold, "nor show its archives held for it: %s", r.ArchiveID)
	}
	heldOnly := true
	recs, err = w.mgr.Records(w.ctx, lifecycle.Filter{Held: &heldOnly})
	require.NoError(t, err)
	require.Empty(t, recs, "nor select them as held")

	_, err = w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-17", "order", nil, "ops:alice")
	var held *courtorder.HeldError
	require.ErrorAs(t, err, &held)
	require.Empty(t, held.Archives, "the refusal names no archive of a sealed case")
	require.Equal(t, []uuid.UUID{sealed.ID}, held.Holds)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-17", "order", []uuid.UUID{sealed.ID}, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, req.Archives, "nor does the request")
	list, err := w.orders.List(w.ctx)
	require.NoError(t, err)
	require.Len(t, list.Expungements, 1)
	require.Empty(t, list.Expungements[0].Archives, "nor the listing")
	res, err := w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	require.Equal(t, 3, res.Rewritten, "the order still rewrites the three archives it recorded")
}

// TestTheApproverSeesTheFrozenList: a purge awaiting approval answers its
// frozen list with each archive's table, records, range, retention date
// and whether an approval now would destroy it (on main no call listed
// them: the second person approved an id).
func TestTheApproverSeesTheFrozenList(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	a, b := w.archived(t, 400, "CURRENT_DATE - 1"), w.archived(t, 401, "CURRENT_DATE - 2")
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	_, err = w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{b.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	v, err := w.mgr.PurgeView(w.ctx, *res.PurgeID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StatusAwaitingApproval, v.Status)
	require.Equal(t, "ops:alice", v.RequestedBy)
	require.Len(t, v.Archives, 2)
	utc := time.Now().UTC()
	byID := map[uuid.UUID]lifecycle.PurgeArchive{}
	for _, x := range v.Archives {
		byID[x.ArchiveID] = x
	}
	got := byID[a.ArchiveID]
	require.Equal(t, "rule_evaluations", got.Table)
	require.Equal(t, 1, got.RecordCount)
	require.True(t, got.FirstRecordAt.Equal(a.FirstRecordAt))
	require.True(t, got.LastRecordAt.Equal(a.LastRecordAt))
	require.NotNil(t, got.RetentionUntil)
	require.Contains(t, []string{utc.AddDate(0, 0, -1).Format(time.DateOnly), utc.Add(-time.Minute).AddDate(0, 0, -1).Format(time.DateOnly)}, *got.RetentionUntil)
	require.True(t, got.Due)
	require.False(t, byID[b.ArchiveID].Due, "held since the freeze: the approval would skip it")
	require.True(t, byID[b.ArchiveID].LegalHold)
	_, err = w.mgr.PurgeView(w.ctx, uuid.Must(uuid.NewV7()))
	require.ErrorIs(t, err, lifecycle.ErrNotFound)
}

// TestUnparsedSubjectsAreCounted: rows whose declared subject field holds
// digits but yields no subject ('[17]', '17-18') are counted by the
// table's invariant, by the pass's retention_subject_unparsed_rows and in
// an expungement's answer (on main nothing told that an order could not
// reach them); a value without digits is no subject and not counted.
func TestUnparsedSubjectsAreCounted(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	for _, v := range []string{`"[17]"`, `"17-18"`, `"seventeen"`, `"+17"`} {
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '3 days', 'r', jsonb_build_object('case_id', $1::jsonb), '{}')`, v)
	}
	spec := subjectSpec()
	spec.Subjects[0].Field = "input ->> 'case_id'"
	res, err := invariants.Check(w.ctx, w.db.Pool, invariants.ForUnparsedSubjects(spec.Table, archive.UnparsedSQL(spec), true))
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Violations, "[17] and 17-18; +17 is case:17, seventeen holds no digit")
	require.Equal(t, "rule_evaluations_subject_unparsed", res.Name)

	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	eng, err := archive.New(w.db.Pool, w.st, []archive.TableSpec{spec}, archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: 5, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true, SubjectKey: w.key},
		slog.New(&kerneltest.LogRecorder{}), am)
	require.NoError(t, err)
	_, err = eng.RunPass(w.ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 2.0, testutil.ToFloat64(am.UnparsedSubjects.WithLabelValues("rule_evaluations")))

	orders, err := courtorder.New(w.db.Pool, w.st, courtorder.Config{Service: w.s3.Service, Tables: []archive.TableSpec{spec}, Key: w.key,
		ObjectLock: true, Bookkeep: archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep}, slog.New(w.logs))
	require.NoError(t, err)
	req, err := orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-5", "order", nil, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, int64(2), req.UnparsedRows)
}

// TestACancelWhileTheBookingWaitsLeavesNoOrphan: a pass cancelled while its
// booking waits on a lock (here a hold placement's), its objects uploaded,
// destroys them before it returns, while the lock is still held: the
// cancelled booking's backend still waits with the upload intent locked,
// so the pass's sweep passes the intent over (the object outlived the pass
// before), and the pass destroys the batch's objects itself.
func TestACancelWhileTheBookingWaitsLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	for n := 1; n <= 3; n++ {
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '200 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', 17, 'n', 300 + $1), '{}')`, n)
	}
	blocker, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(w.ctx) }()
	_, err = blocker.Exec(w.ctx, `SELECT pg_advisory_xact_lock($1)`, lease.HoldsKey)
	require.NoError(t, err)
	pctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := w.eng.RunPass(pctx, 1)
		done <- err
	}()
	waiting := func() bool {
		var n int
		require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event = 'advisory'`, w.db.Name).Scan(&n))
		return n > 0
	}
	require.Eventually(t, waiting, 30*time.Second, 5*time.Millisecond, "the booking waits on the holds lock")
	cancel()
	if err := <-done; err != nil {
		require.ErrorIs(t, err, context.Canceled, "a cancelled pass fails nothing")
	}
	// The lock is still held: the batch's objects are gone already.
	rows, err := w.db.Pool.Query(w.ctx, `SELECT object_key FROM archive_upload_intents WHERE work = 'archive'`)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, keys, 2, "the batch's data and manifest were recorded, and no booking cleared them")
	for _, key := range keys {
		n, err := w.st.VersionCount(w.ctx, key)
		require.NoError(t, err)
		require.Zero(t, n, "no version of %s is left", key)
	}
}

// plantedDoc is an archived line of rule_evaluations about case c that no
// table holds.
func plantedDoc(c int, note string) string {
	return fmt.Sprintf(`{"id": "%s", "input": {"note": "%s", "case_id": %d}, "output": {}, "rule_id": "r", "evaluated_at": "2026-01-10T10:00:00+00:00"}`,
		uuid.Must(uuid.NewV7()), note, c)
}

// plant writes docs as the data object of archive id, known to no ledger
// row and no intent (someone with the store's credentials, or a restore
// that forgot its booking).
func (w *orderWorld) plant(t *testing.T, id uuid.UUID, docs ...string) string {
	t.Helper()
	keys, err := store.NewArchiveKeys(w.s3.Service, "rule_evaluations", time.Now(), id.String())
	require.NoError(t, err)
	require.NoError(t, w.st.PutCreate(w.ctx, keys.Data, []byte(strings.Join(docs, "\n")+"\n"), store.ContentTypeNDJSON))
	return keys.Data
}

// TestAnUnknownObjectIsJudgedByEveryVersion: an unknown object whose first
// version holds only another case's rows (in no other place) and whose
// later version holds the subject's: the expungement refuses until
// reconcile (it judged the first version alone, completed, and left the
// subject's row in the later version).
func TestAnUnknownObjectIsJudgedByEveryVersion(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	key := w.plant(t, uuid.Must(uuid.NewV7()), plantedDoc(18, "only-copy-18"))
	raw, err := blob.OpenBucket(w.ctx, w.s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	require.NoError(t, raw.WriteAll(w.ctx, key, []byte(plantedDoc(17, canary)+"\n"), nil))
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-V2", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.ErrorIs(t, err, courtorder.ErrOrphans)
}

// TestASuccessorsNameAloneDestroysNothing: an unknown object named like an
// expungement's successor (a version-5 id) but with no manifest deriving it
// from a booked archive holds the only copy of a case 18 row: an
// expungement of case 17 leaves it (it destroyed it unread).
func TestASuccessorsNameAloneDestroysNothing(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	key := w.plant(t, uuid.NewSHA1(uuid.NameSpaceURL, []byte("not a successor")), plantedDoc(18, "v5-only-copy"))
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-V5", "order", nil, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)
	n, err := w.st.VersionCount(w.ctx, key)
	require.NoError(t, err)
	require.NotZero(t, n, "the only copy of a case 18 row is left")
}
