package archiveread_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
)

// TestOverwrittenArchiveReadsAndHeals: Object Lock
// protects versions, not the current pointer. A held archive whose data is
// overwritten and whose manifest is delete-marked with the store's
// credentials is still served, exactly, from the version that matches the
// ledger; verify makes that version current again (kind restored); and a
// purge of the archive once due destroys every version and marker, even
// over a delete marker and a version still under its legal hold.
func TestOverwrittenArchiveReadsAndHeals(t *testing.T) {
	t.Parallel()
	w := newHeldWorld(t)
	require.NoError(t, w.raw.WriteAll(w.ctx, w.keys.Data, []byte(`{"id": "`+w.rowID.String()+`", "forged": true}`+"\n"), nil))
	require.NoError(t, w.raw.Delete(w.ctx, w.keys.Manifest))

	f, err := w.r.Row(w.ctx, "rule_evaluations", w.rowID, "ops:dana")
	require.NoError(t, err, "the version that matches the ledger is served")
	require.JSONEq(t, string(bytes.TrimSpace(w.data)), string(f.Row))
	var out bytes.Buffer
	sum, err := w.r.Range(w.ctx, &out, "rule_evaluations", w.at.Add(-time.Hour), w.at.Add(time.Hour), "ops:dana")
	require.NoError(t, err)
	require.Equal(t, 1, sum.ArchivedRows)
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.Len(t, lines, 2, "the row and the summary")
	require.JSONEq(t, string(bytes.TrimSpace(w.data)), string(lines[0]))

	for i, what := range []string{"the manifest, delete-marked", "the data, overwritten"} {
		rep, err := w.r.Verify(w.ctx, true, 0)
		require.NoError(t, err)
		require.Len(t, rep.Failures, 1, "pass %d restores %s", i+1, what)
		require.Equal(t, archiveread.KindRestored, rep.Failures[0].Kind, what)
	}
	rep, err := w.r.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Empty(t, rep.Failures, "healed")
	for _, key := range []string{w.keys.Data, w.keys.Manifest} {
		on, err := w.st.LegalHold(w.ctx, key)
		require.NoError(t, err)
		require.True(t, on, "%s: the restored version carries the archive's legal hold", key)
	}
	cur, err := w.st.Get(w.ctx, w.keys.Data)
	require.NoError(t, err)
	require.Equal(t, w.data, cur)

	// Released and due, with a delete marker on top again: the purge
	// destroys every version and marker.
	require.NoError(t, w.raw.Delete(w.ctx, w.keys.Data))
	w.releaseAndPurge(t)
}

// TestThousandOverwrites:
// a listing of versions stops at 1,000 entries; a held archive overwritten
// 1,001 times is still served from its matching version, verify restores
// it, and the purge, once it is due, leaves no version behind (every page
// of versions is read).
func TestThousandOverwrites(t *testing.T) {
	t.Parallel()
	w := newHeldWorld(t)
	for i := range 1001 {
		require.NoError(t, w.raw.WriteAll(w.ctx, w.keys.Data, fmt.Appendf(nil, `{"id": "%s", "forged": %d}`+"\n", w.rowID, i), nil))
	}
	f, err := w.r.Row(w.ctx, "rule_evaluations", w.rowID, "ops:dana")
	require.NoError(t, err, "served from the matching version, on the listing's second page")
	require.JSONEq(t, string(bytes.TrimSpace(w.data)), string(f.Row))
	rep, err := w.r.Verify(w.ctx, true, 0)
	require.NoError(t, err)
	require.Len(t, rep.Failures, 1)
	require.Equal(t, archiveread.KindRestored, rep.Failures[0].Kind)
	w.releaseAndPurge(t)
}

// heldWorld is one booked, held archive of one rule_evaluations row in an
// Object Lock bucket, its lifecycle manager and raw access to the bucket
// with the store's own credentials (what a leaked credential can do).
type heldWorld struct {
	ctx   context.Context
	db    *kerneltest.DB
	st    *store.Store
	raw   *blob.Bucket
	r     *archiveread.Reader
	mgr   *lifecycle.Manager
	keys  store.ArchiveKeys
	id    uuid.UUID
	rowID uuid.UUID
	at    time.Time
	data  []byte
	hold  uuid.UUID
}

func newHeldWorld(t *testing.T) *heldWorld {
	t.Helper()
	ctx, db, s3, st := scratchWorld(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(cancel)
	locked, err := st.ObjectLock(ctx)
	require.NoError(t, err)
	require.True(t, locked, "the test bucket has Object Lock (go tool mage store:up)")
	raw, err := blob.OpenBucket(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	w := &heldWorld{ctx: ctx, db: db, st: st, raw: raw, id: uuid.Must(uuid.NewV7()), rowID: uuid.Must(uuid.NewV7()),
		at: time.Now().UTC().AddDate(0, 0, -400).Truncate(time.Microsecond)}
	w.keys, err = store.NewArchiveKeys(s3.Service, "rule_evaluations", w.at, w.id.String())
	require.NoError(t, err)
	w.data = []byte(`{"id": "` + w.rowID.String() + `", "evaluated_at": "` + w.at.Format(time.RFC3339Nano) + `", "rule_id": "r"}` + "\n")
	m := archive.Manifest{ArchiveID: w.id, Table: "rule_evaluations", DataKey: w.keys.Data, ManifestKey: w.keys.Manifest,
		DataSHA256: archive.SHA256Hex(w.data), RecordCount: 1, Endpoint: st.Identity().Endpoint, Bucket: st.Identity().Bucket,
		FirstRecordID: w.rowID, LastRecordID: w.rowID, FirstRecordAt: w.at, LastRecordAt: w.at, HotWindowDays: 90, ArchivedAt: w.at, ArchivedBy: archive.SystemActor}
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, w.keys.Data, w.data, store.ContentTypeNDJSON))
	require.NoError(t, st.PutCreate(ctx, w.keys.Manifest, mb, store.ContentTypeJSON))
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, m, archive.SystemActor)
	}))
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	w.mgr, err = lifecycle.New(db.Pool, st, lifecycle.Config{Service: s3.Service, ObjectLock: true}, slog.New(&kerneltest.LogRecorder{}), pm)
	require.NoError(t, err)
	h, err := w.mgr.PlaceHold(ctx, lifecycle.HoldRequest{Title: "hearing", Reason: "subpoena", ArchiveIDs: []uuid.UUID{w.id}}, "ops:carol")
	require.NoError(t, err)
	w.hold = h.ID
	w.r = archiveread.New(db.Pool, st, s3.Service, archiveTables())
	return w
}

// releaseAndPurge releases the hold, makes the archive due and purges it;
// nothing of it may be left.
func (w *heldWorld) releaseAndPurge(t *testing.T) {
	t.Helper()
	_, err := w.mgr.ReleaseHold(w.ctx, w.hold, "hearing closed", "ops:carol")
	require.NoError(t, err)
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE archive_id = $1`, w.id)
	res, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{w.id}, res.Purged, "failed: %v", res.Failed)
	for _, key := range []string{w.keys.Data, w.keys.Manifest} {
		left, err := w.st.DestroyAllVersions(w.ctx, key)
		require.NoError(t, err)
		require.False(t, left, "%s: no version left", key)
	}
	_, _ = w.st.DestroyAllVersions(w.ctx, res.Certificate)
}
