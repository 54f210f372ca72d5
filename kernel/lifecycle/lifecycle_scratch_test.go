package lifecycle_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// world is a rules database (it has the archive set), a scratch prefix of
// the real store and a lifecycle manager over both.
type world struct {
	ctx context.Context
	db  *kerneltest.DB
	s3  *kerneltest.S3Scratch
	st  *store.Store
	m   *metrics.Purge
	mgr *lifecycle.Manager
}

func newWorld(t *testing.T, approvals int) *world {
	t.Helper()
	return newWorldLocked(t, approvals, false)
}

// newWorldLocked is newWorld with the store's Object Lock in use.
func newWorldLocked(t *testing.T, approvals int, objectLock bool) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	w := &world{ctx: ctx, db: kerneltest.NewDB(t, kerneltest.ArchivingFixture()...), s3: kerneltest.NewS3Scratch(t)}
	var err error
	w.st, err = store.Open(ctx, w.s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.st.Close() })
	w.m, err = metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	w.mgr, err = lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ApprovalsRequired: approvals, ObjectLock: objectLock},
		slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	return w
}

// archived books one archive of rule_evaluations (ledger row through the
// kernel's bookkeeping, both objects in the store) with its record times
// daysAgo days ago and the given retention date (SQL, e.g. "NULL",
// "CURRENT_DATE - 1").
func (w *world) archived(t *testing.T, daysAgo int, retention string) archive.Manifest {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	at := time.Now().UTC().Add(-time.Duration(daysAgo) * 24 * time.Hour).Truncate(time.Microsecond)
	keys, err := store.NewArchiveKeys(w.s3.Service, "rule_evaluations", time.Now(), id.String())
	require.NoError(t, err)
	ident := w.st.Identity()
	m := archive.Manifest{ArchiveID: id, Table: "rule_evaluations", DataKey: keys.Data, ManifestKey: keys.Manifest,
		DataSHA256: archive.SHA256Hex([]byte("{}\n")), RecordCount: 1, Endpoint: ident.Endpoint, Bucket: ident.Bucket,
		FirstRecordID: uuid.Must(uuid.NewV7()), LastRecordID: uuid.Max, FirstRecordAt: at, LastRecordAt: at.Add(time.Hour),
		HotWindowDays: 90, ArchivedAt: time.Now().UTC()}
	require.NoError(t, w.st.PutCreate(w.ctx, keys.Data, []byte("{}\n"), store.ContentTypeNDJSON))
	require.NoError(t, w.st.PutCreate(w.ctx, keys.Manifest, []byte(`{}`), store.ContentTypeJSON))
	require.NoError(t, pgx.BeginFunc(w.ctx, w.db.Pool, func(tx pgx.Tx) error {
		return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(w.ctx, tx, m, archive.SystemActor)
	}))
	w.db.Exec(t, "UPDATE archive_ledger SET retention_until = "+retention+" WHERE archive_id = $1", id)
	return m
}

func (w *world) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := w.st.Get(w.ctx, key)
	if err == nil {
		return true
	}
	require.ErrorIs(t, err, store.ErrNotFound)
	return false
}

func (w *world) purgedBy(t *testing.T, id uuid.UUID) *string {
	t.Helper()
	var by *string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT purged_by FROM archive_ledger WHERE archive_id = $1`, id).Scan(&by))
	return by
}

// TestPurgeMatrix: only dated, due, unheld archives
// are destroyed — manifest and data gone, stamped, certified, announced —
// and everything else survives.
func TestPurgeMatrix(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	noDate := w.archived(t, 400, "NULL")
	future := w.archived(t, 400, "CURRENT_DATE + 1")
	heldByID := w.archived(t, 400, "CURRENT_DATE - 1")
	heldByRange := w.archived(t, 300, "CURRENT_DATE - 1")
	due := w.archived(t, 500, "CURRENT_DATE")
	_, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "Case 17 hearing", Reason: "subpoena", ArchiveIDs: []uuid.UUID{heldByID.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	table := "rule_evaluations"
	from, to := time.Now().Add(-310*24*time.Hour), time.Now().Add(-290*24*time.Hour)
	rangeHold, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "Audit 2026", Reason: "federal audit", Table: &table, From: &from, To: &to}, "ops:carol")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{heldByRange.ArchiveID}, rangeHold.Covers)

	dry, err := w.mgr.Purge(w.ctx, 10, true, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{due.ArchiveID}, dry.Candidates)
	require.True(t, w.exists(t, due.DataKey), "a dry run deletes nothing")
	states, err := w.mgr.LedgerStates(w.ctx) // the dashboard's counts
	require.NoError(t, err)
	require.Equal(t, map[string]map[string]int64{"rule_evaluations": {lifecycle.StateKept: 5, lifecycle.StateHeld: 2, lifecycle.StateDue: 1,
		lifecycle.StateUndated: 1, lifecycle.StatePurged: 0}}, states)

	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{due.ArchiveID}, res.Purged)
	require.False(t, res.More)
	require.False(t, w.exists(t, due.DataKey))
	require.False(t, w.exists(t, due.ManifestKey))
	require.Equal(t, "ops:alice", *w.purgedBy(t, due.ArchiveID))
	for _, kept := range []archive.Manifest{noDate, future, heldByID, heldByRange} {
		require.True(t, w.exists(t, kept.DataKey), kept.ArchiveID.String())
		require.True(t, w.exists(t, kept.ManifestKey), kept.ArchiveID.String())
		require.Nil(t, w.purgedBy(t, kept.ArchiveID))
	}
	requireCertificate(t, w, res, "ops:alice", nil, due)
	states, err = w.mgr.LedgerStates(w.ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{lifecycle.StateKept: 4, lifecycle.StateHeld: 2, lifecycle.StateDue: 0,
		lifecycle.StateUndated: 1, lifecycle.StatePurged: 1}, states["rule_evaluations"])
	require.Equal(t, 1.0, testutil.ToFloat64(w.m.Purged.WithLabelValues("rule_evaluations")))
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = $1`, w.s3.Service+".archive_purged"))
	require.Equal(t, int64(2), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = $1`, w.s3.Service+".archive_hold_placed"))

	again, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, again.Purged, "re-running is idempotent")

	// A later archive inside the range hold's window is held from the start.
	later := w.archived(t, 300, "CURRENT_DATE - 1")
	recs, err := w.mgr.Records(w.ctx, lifecycle.Filter{Held: ptr(true)})
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{heldByID.ArchiveID, heldByRange.ArchiveID, later.ArchiveID}, ids(recs))
	// Releasing the range hold (a reason is required) makes both due.
	_, err = w.mgr.ReleaseHold(w.ctx, rangeHold.ID, "", "ops:carol")
	require.ErrorIs(t, err, lifecycle.ErrInvalid)
	_, err = w.mgr.ReleaseHold(w.ctx, rangeHold.ID, "audit closed", "ops:carol")
	require.NoError(t, err)
	res, err = w.mgr.Purge(w.ctx, 1, false, "ops:alice")
	require.NoError(t, err)
	require.Len(t, res.Purged, 1)
	require.True(t, res.More, "limit 1 of 2 due")
	res, err = w.mgr.Purge(w.ctx, 1, false, "ops:alice")
	require.NoError(t, err)
	require.Len(t, res.Purged, 1)
	require.False(t, res.More)
}

// TestHoldBetweenDryRunAndPurgeWins: a hold placed after a dry run listed
// an archive keeps it.
func TestHoldBetweenDryRunAndPurgeWins(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	due := w.archived(t, 400, "CURRENT_DATE - 10")
	dry, err := w.mgr.Purge(w.ctx, 10, true, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{due.ArchiveID}, dry.Candidates)
	_, err = w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{due.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, res.Purged)
	require.True(t, w.exists(t, due.DataKey))
}

// TestDualControl: with one approval required a purge freezes its list;
// the requester cannot approve it; a hold placed before the approval wins;
// another operator's approval executes the rest and both are recorded.
func TestDualControl(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	a, b := w.archived(t, 400, "CURRENT_DATE - 1"), w.archived(t, 401, "CURRENT_DATE - 1")
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StatusAwaitingApproval, res.Status)
	require.ElementsMatch(t, []uuid.UUID{a.ArchiveID, b.ArchiveID}, res.Candidates)
	require.True(t, w.exists(t, a.DataKey), "nothing destroyed before approval")

	_, err = w.mgr.Approve(w.ctx, *res.PurgeID, "ops:alice")
	require.ErrorIs(t, err, lifecycle.ErrSelfApproval)
	// The same person in another spelling is not a
	// second identity.
	for _, same := range []string{"Ops:Alice", "ops\uff1aalice", "ops:\u0430lice"} {
		_, err = w.mgr.Approve(w.ctx, *res.PurgeID, same)
		require.ErrorIs(t, err, lifecycle.ErrSelfApproval, same)
	}
	_, err = w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{b.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	done, err := w.mgr.Approve(w.ctx, *res.PurgeID, "ops:bob")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{a.ArchiveID}, done.Purged)
	require.Equal(t, []uuid.UUID{b.ArchiveID}, done.Skipped)
	require.Equal(t, "ops:bob", *w.purgedBy(t, a.ArchiveID))
	require.True(t, w.exists(t, b.DataKey))
	approver := "ops:bob"
	requireCertificate(t, w, done, "ops:alice", &approver, a)
	_, err = w.mgr.Approve(w.ctx, *res.PurgeID, "ops:dave")
	require.ErrorIs(t, err, lifecycle.ErrNotAwaiting, "executed once")
	var status, requested, approved string
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT status, requested_by, approved_by FROM purges WHERE purge_id = $1`, *res.PurgeID).Scan(&status, &requested, &approved))
	require.Equal(t, []string{"executed", "ops:alice", "ops:bob"}, []string{status, requested, approved})
}

// TestPurgeFinishesAfterACrash: a purge that deleted the manifest and died
// before the stamp leaves the archive unstamped and still due; the next
// call deletes the data and stamps it.
func TestPurgeFinishesAfterACrash(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	a := w.archived(t, 400, "CURRENT_DATE - 1")
	_, err := w.st.DeleteIfExists(w.ctx, a.ManifestKey) // what the crashed purge got done
	require.NoError(t, err)
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{a.ArchiveID}, res.Purged)
	require.False(t, w.exists(t, a.DataKey))
	require.NotNil(t, w.purgedBy(t, a.ArchiveID))
}

// TestRetentionAndBadInput: a retention date is set and moved (logged,
// announced), refused on a purged or unknown archive; bad holds and limits
// are refused and change nothing.
func TestRetentionAndBadInput(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	a := w.archived(t, 400, "NULL")
	// Without the purge scope a date can only move
	// destruction further away; an undated archive is never purgeable.
	require.ErrorIs(t, w.mgr.SetRetention(w.ctx, a.ArchiveID, time.Now().AddDate(0, 0, 30), "ops:carol", false), lifecycle.ErrShortens)
	require.NoError(t, w.mgr.SetRetention(w.ctx, a.ArchiveID, time.Now().AddDate(0, 0, 30), "ops:carol", true))
	require.NoError(t, w.mgr.SetRetention(w.ctx, a.ArchiveID, time.Now().AddDate(0, 0, 31), "ops:carol", false))
	require.ErrorIs(t, w.mgr.SetRetention(w.ctx, a.ArchiveID, time.Now().AddDate(0, 0, 29), "ops:carol", false), lifecycle.ErrShortens)
	require.ErrorIs(t, w.mgr.SetRetention(w.ctx, a.ArchiveID, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), "ops:carol", false), lifecycle.ErrShortens)
	require.NoError(t, w.mgr.SetRetention(w.ctx, a.ArchiveID, time.Now().AddDate(0, 0, -1), "ops:carol", true))
	require.Equal(t, int64(3), w.db.Count(t, `SELECT count(*) FROM archive_lifecycle_log WHERE action = 'archive_retention_set' AND actor = 'ops:carol'`), "three dates set, the refused ones not logged")
	require.ErrorIs(t, w.mgr.SetRetention(w.ctx, uuid.New(), time.Now(), "ops:carol", true), lifecycle.ErrNotFound)
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Len(t, res.Purged, 1)
	require.ErrorIs(t, w.mgr.SetRetention(w.ctx, a.ArchiveID, time.Now(), "ops:carol", true), lifecycle.ErrPurged)

	for _, req := range []lifecycle.HoldRequest{
		{Title: "", Reason: "r", ArchiveIDs: []uuid.UUID{a.ArchiveID}}, {Title: "t", Reason: "r"},
		{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{a.ArchiveID, uuid.New()}}, // an id the ledger does not hold
	} {
		_, err := w.mgr.PlaceHold(w.ctx, req, "ops:carol")
		require.ErrorIs(t, err, lifecycle.ErrInvalid)
	}
	for _, limit := range []int{0, -1, 101} {
		_, err := w.mgr.Purge(w.ctx, limit, false, "ops:alice")
		require.ErrorIs(t, err, lifecycle.ErrInvalid)
	}
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_holds`))
}

func requireCertificate(t *testing.T, w *world, res lifecycle.PurgeResult, actor string, approver *string, destroyed ...archive.Manifest) {
	t.Helper()
	require.Equal(t, "retention-archives/"+w.s3.Service+"/purges/"+res.PurgeID.String()+".json", res.Certificate)
	b, err := w.st.Get(w.ctx, res.Certificate)
	require.NoError(t, err)
	var c struct {
		PurgeID  uuid.UUID `json:"purge_id"`
		Actor    string    `json:"actor"`
		Approver *string   `json:"approver"`
		Archives []struct {
			ArchiveID  uuid.UUID `json:"archive_id"`
			DataKey    string    `json:"data_key"`
			DataSHA256 string    `json:"data_sha256"`
		} `json:"archives"`
	}
	require.NoError(t, json.Unmarshal(b, &c))
	require.Equal(t, *res.PurgeID, c.PurgeID)
	require.Equal(t, actor, c.Actor)
	require.Equal(t, approver, c.Approver)
	require.Len(t, c.Archives, len(destroyed))
	for i, d := range destroyed {
		require.Equal(t, d.ArchiveID, c.Archives[i].ArchiveID)
		require.Equal(t, d.DataKey, c.Archives[i].DataKey)
		require.Equal(t, d.DataSHA256, c.Archives[i].DataSHA256)
	}
	require.ErrorIs(t, w.st.PutCreate(w.ctx, res.Certificate, []byte("{}"), store.ContentTypeJSON), store.ErrAlreadyExists, "a certificate cannot be overwritten")
}

func ptr[T any](v T) *T { return &v }

func ids(recs []lifecycle.Record) []uuid.UUID {
	out := make([]uuid.UUID, len(recs))
	for i, r := range recs {
		out[i] = r.ArchiveID
	}
	return out
}

// TestStoreEnforcedHolds: with S3 Object Lock (store:up creates the bucket
// with it), a hold also puts a legal hold on both objects, so the store
// itself refuses to delete any version of a held archive; releasing the
// last hold lifts it, and the purge then destroys every version.
func TestStoreEnforcedHolds(t *testing.T) {
	t.Parallel()
	probe := newWorld(t, 0)
	locked, err := probe.st.ObjectLock(probe.ctx)
	require.NoError(t, err)
	require.True(t, locked, "the test bucket has no S3 Object Lock: run `go tool mage store:up` (it creates the bucket with it)")
	w := newWorldLocked(t, 0, true)
	a := w.archived(t, 400, "CURRENT_DATE - 1")
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "hearing", Reason: "subpoena", ArchiveIDs: []uuid.UUID{a.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	for _, key := range []string{a.DataKey, a.ManifestKey} {
		_, err := w.st.DestroyAllVersions(w.ctx, key)
		require.ErrorIs(t, err, store.ErrLocked, "a raw delete of every version of %s is refused while held", key)
		require.True(t, w.exists(t, key))
	}
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, res.Purged)

	_, err = w.mgr.ReleaseHold(w.ctx, h.ID, "hearing closed", "ops:carol")
	require.NoError(t, err)
	res, err = w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{a.ArchiveID}, res.Purged)
	for _, key := range []string{a.DataKey, a.ManifestKey} {
		left, err := w.st.DestroyAllVersions(w.ctx, key)
		require.NoError(t, err)
		require.False(t, left, "%s: no version of a purged object is left", key)
	}
	_, _ = w.st.DestroyAllVersions(context.Background(), res.Certificate)
}

// TestPurgeDueByUTCDate: retention dates are UTC dates,
// whatever the session's time zone. The manager runs on a pool whose
// sessions are NOT pinned (the database's own zone applies) in a zone whose
// local date differs from the UTC date right now (+14 when the UTC hour is
// 10 or later, -12 before): an archive retained until tomorrow (UTC) is
// never purged, one retained until today (UTC) is.
func TestPurgeDueByUTCDate(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	zone := "Pacific/Kiritimati"
	if time.Now().UTC().Hour() < 10 {
		zone = "Etc/GMT+12"
	}
	w.db.Exec(t, "ALTER DATABASE "+pgx.Identifier{w.db.Name}.Sanitize()+" SET timezone = '"+zone+"'")
	w.db.Exec(t, "ALTER DATABASE "+pgx.Identifier{w.db.Name}.Sanitize()+" SET datestyle = 'SQL, DMY'")
	raw, err := pgxpool.New(w.ctx, w.db.URL) // unpinned: the database's settings apply
	require.NoError(t, err)
	t.Cleanup(raw.Close)
	var local, utc time.Time
	require.NoError(t, raw.QueryRow(w.ctx, `SELECT CURRENT_DATE, (now() AT TIME ZONE 'UTC')::date`).Scan(&local, &utc))
	require.NotEqual(t, utc, local, "the test needs a session whose date is not the UTC date")
	mgr, err := lifecycle.New(raw, w.st, lifecycle.Config{Service: w.s3.Service}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)

	utcToday := time.Now().UTC().Format(time.DateOnly)
	tomorrow := w.archived(t, 400, "'"+utcToday+"'::date + 1")
	today := w.archived(t, 400, "'"+utcToday+"'::date")
	dry, err := mgr.Purge(w.ctx, 10, true, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{today.ArchiveID}, dry.Candidates)
	recs, err := mgr.Records(w.ctx, lifecycle.Filter{Purgeable: ptr(true)})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{today.ArchiveID}, ids(recs))
	res, err := mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Len(t, res.Purged, 1)
	require.True(t, w.exists(t, tomorrow.DataKey), "an archive retained until tomorrow (UTC) was destroyed")
	require.False(t, w.exists(t, today.DataKey))
}

// TestReconcileLocks: a hold placed where the store's
// Object Lock was not used (the archiver disabled, the store unknown) is
// recorded in the ledger only; the reconciliation locks every held
// archive's objects, reports the drift (archive_hold_lock_drift, WARN) and
// finds none the next time; an unheld archive is not locked.
func TestReconcileLocks(t *testing.T) {
	t.Parallel()
	w := newWorldLocked(t, 0, false) // holds placed without the store's locks
	held, free := w.archived(t, 400, "NULL"), w.archived(t, 400, "NULL")
	_, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "hearing", Reason: "subpoena", ArchiveIDs: []uuid.UUID{held.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	for _, key := range []string{held.DataKey, held.ManifestKey} {
		on, err := w.st.LegalHold(w.ctx, key)
		require.NoError(t, err)
		require.False(t, on, "the drift this test starts from")
	}
	locking, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	rep, err := locking.ReconcileLocks(w.ctx)
	require.NoError(t, err)
	require.Equal(t, lifecycle.LockReport{Held: 1, Drift: 2, Locked: 2}, rep)
	require.InDelta(t, 2, testutil.ToFloat64(w.m.HoldLockDrift), 0)
	for _, key := range []string{held.DataKey, held.ManifestKey} {
		on, err := w.st.LegalHold(w.ctx, key)
		require.NoError(t, err)
		require.True(t, on, "%s is locked", key)
		_, err = w.st.DestroyAllVersions(w.ctx, key)
		require.ErrorIs(t, err, store.ErrLocked)
	}
	on, err := w.st.LegalHold(w.ctx, free.DataKey)
	require.NoError(t, err)
	require.False(t, on, "an unheld archive is not locked")
	rep, err = locking.ReconcileLocks(w.ctx)
	require.NoError(t, err)
	require.Equal(t, lifecycle.LockReport{Held: 1}, rep)
	require.Zero(t, testutil.ToFloat64(w.m.HoldLockDrift))
	for _, key := range []string{held.DataKey, held.ManifestKey} {
		require.NoError(t, w.st.SetLegalHold(context.Background(), key, false))
	}
}

// TestHoldRefusals: a hold by a table the service
// does not archive (a misspelling) is refused, so is one naming a purged
// archive; neither is recorded.
func TestHoldRefusals(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	mgr, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, Tables: []string{"rule_evaluations"}}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	_, err = mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Table: ptr("rule_evaluatons")}, "ops:carol")
	require.ErrorIs(t, err, lifecycle.ErrInvalid)
	due := w.archived(t, 400, "CURRENT_DATE - 1")
	res, err := mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{due.ArchiveID}, res.Purged)
	_, err = mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{due.ArchiveID}}, "ops:carol")
	require.ErrorIs(t, err, lifecycle.ErrHeldPurged)
	require.Zero(t, w.db.Count(t, "SELECT count(*) FROM archive_holds"))
	_, err = mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Table: ptr("rule_evaluations")}, "ops:carol")
	require.NoError(t, err)
}

// TestPurgeExactly: a purge of confirmed archives
// destroys exactly those, never another due one; if any of them stopped
// being purgeable since the operator saw the list, nothing is destroyed and
// the answer names it.
func TestPurgeExactly(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	a, b, c := w.archived(t, 400, "CURRENT_DATE - 1"), w.archived(t, 401, "CURRENT_DATE - 1"), w.archived(t, 402, "CURRENT_DATE - 1")
	_, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{b.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	_, err = w.mgr.PurgeExactly(w.ctx, []uuid.UUID{a.ArchiveID, b.ArchiveID}, "ops:alice")
	var gone *lifecycle.NoLongerPurgeableError
	require.ErrorAs(t, err, &gone)
	require.Equal(t, []uuid.UUID{b.ArchiveID}, gone.IDs)
	require.True(t, w.exists(t, a.DataKey), "nothing destroyed")
	_, err = w.mgr.PurgeExactly(w.ctx, []uuid.UUID{a.ArchiveID, a.ArchiveID}, "ops:alice")
	require.ErrorIs(t, err, lifecycle.ErrInvalid)
	res, err := w.mgr.PurgeExactly(w.ctx, []uuid.UUID{a.ArchiveID}, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{a.ArchiveID}, res.Purged)
	require.True(t, w.exists(t, c.DataKey), "a due archive nobody confirmed is not destroyed")
	_, _ = w.st.DeleteIfExists(context.Background(), res.Certificate)
}

// waitForLockWait waits (bounded, polling the server's own signal) until a
// session of the scratch database waits on a lock.
func waitForLockWait(t *testing.T, w *world) {
	t.Helper()
	require.Eventually(t, func() bool {
		return w.db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	}, time.Minute, 10*time.Millisecond, "a session waits on the row lock")
}

// TestRetentionJudgedAgainstTheCommittedDate: a date is
// judged against the date it replaces once the row is locked, not one read
// before a concurrent change committed: moving 2030 to 2035 while another
// call's 2040 is committing is bringing destruction nearer (from 2040), which
// archive:hold may not do.
func TestRetentionJudgedAgainstTheCommittedDate(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	a := w.archived(t, 400, "'2030-01-01'")
	other, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Rollback(context.Background()) })
	_, err = other.Exec(w.ctx, `UPDATE archive_ledger SET retention_until = '2040-01-01' WHERE archive_id = $1`, a.ArchiveID)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- w.mgr.SetRetention(w.ctx, a.ArchiveID, time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC), "ops:bob", false)
	}()
	waitForLockWait(t, w)
	require.NoError(t, other.Commit(w.ctx))
	require.ErrorIs(t, <-done, lifecycle.ErrShortens)
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE archive_id = $1 AND retention_until = '2040-01-01'`, a.ArchiveID))
}

// TestPurgeExactlyStopsAtAHoldPlacedMeanwhile: a confirmed
// list [x, y] whose y is held while x is being destroyed: x (already
// destroyed) is reported, y is kept, and the answer is no_longer_purgeable
// naming y, never a quiet success.
func TestPurgeExactlyStopsAtAHoldPlacedMeanwhile(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	x, y := w.archived(t, 400, "CURRENT_DATE - 10"), w.archived(t, 401, "CURRENT_DATE - 10")
	hold, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback(context.Background()) })
	_, err = hold.Exec(w.ctx, `SELECT 1 FROM archive_ledger WHERE archive_id = $1 FOR UPDATE`, y.ArchiveID)
	require.NoError(t, err)
	type out struct {
		res lifecycle.PurgeResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := w.mgr.PurgeExactly(w.ctx, []uuid.UUID{x.ArchiveID, y.ArchiveID}, "ops:alice")
		done <- out{r, err}
	}()
	waitForLockWait(t, w) // the purge waits on y, x destroyed
	_, err = hold.Exec(w.ctx, `INSERT INTO archive_holds (title, reason, archive_ids, created_by) VALUES ('t', 'r', $1, 'ops:carol')`, []uuid.UUID{y.ArchiveID})
	require.NoError(t, err)
	_, err = hold.Exec(w.ctx, `UPDATE archive_ledger SET legal_hold = true WHERE archive_id = $1`, y.ArchiveID)
	require.NoError(t, err)
	require.NoError(t, hold.Commit(w.ctx))
	o := <-done
	var gone *lifecycle.NoLongerPurgeableError
	require.ErrorAs(t, o.err, &gone)
	require.Equal(t, []uuid.UUID{y.ArchiveID}, gone.IDs)
	require.Equal(t, []uuid.UUID{x.ArchiveID}, gone.Purged, "what was destroyed before is reported")
	require.True(t, w.exists(t, y.DataKey), "the held archive is kept")
	_, _ = w.st.DeleteIfExists(context.Background(), gone.Certificate)
}
