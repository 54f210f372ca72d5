//go:build scratch

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

// TestOverwrittenArchiveReadsAndHeals (issue 22 finding 6): Object Lock
// protects versions, not the current pointer. A held archive whose data is
// overwritten and whose manifest is delete-marked with the store's
// credentials is still served, exactly, from the version that matches the
// ledger; verify makes that version current again (kind restored); and a
// purge of the archive once due destroys every version and marker, even
// over a delete marker and a version still under its legal hold.
func TestOverwrittenArchiveReadsAndHeals(t *testing.T) {
	t.Parallel()
	ctx, db, s3, st := scratchWorld(t)
	locked, err := st.ObjectLock(ctx)
	require.NoError(t, err)
	require.True(t, locked, "the test bucket has Object Lock (go tool mage store:up)")
	raw, err := blob.OpenBucket(ctx, s3.URL) // the store's credentials, used by hand
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })

	at := time.Now().UTC().AddDate(0, 0, -400).Truncate(time.Microsecond)
	id, rowID := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	keys, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", at, id.String())
	require.NoError(t, err)
	data := []byte(`{"id": "` + rowID.String() + `", "evaluated_at": "` + at.Format(time.RFC3339Nano) + `", "rule_id": "r"}` + "\n")
	m := archive.Manifest{ArchiveID: id, Table: "rule_evaluations", DataKey: keys.Data, ManifestKey: keys.Manifest,
		DataSHA256: archive.SHA256Hex(data), RecordCount: 1, Endpoint: st.Identity().Endpoint, Bucket: st.Identity().Bucket,
		FirstRecordID: rowID, LastRecordID: rowID, FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: at, ArchivedBy: archive.SystemActor}
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, keys.Data, data, store.ContentTypeNDJSON))
	require.NoError(t, st.PutCreate(ctx, keys.Manifest, mb, store.ContentTypeJSON))
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, m, archive.SystemActor)
	}))
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	mgr, err := lifecycle.New(db.Pool, st, lifecycle.Config{Service: s3.Service, ObjectLock: true}, slog.New(&kerneltest.LogRecorder{}), pm)
	require.NoError(t, err)
	h, err := mgr.PlaceHold(ctx, lifecycle.HoldRequest{Title: "hearing", Reason: "subpoena", ArchiveIDs: []uuid.UUID{id}}, "ops:carol")
	require.NoError(t, err)

	require.NoError(t, raw.WriteAll(ctx, keys.Data, []byte(`{"id": "`+rowID.String()+`", "forged": true}`+"\n"), nil))
	require.NoError(t, raw.Delete(ctx, keys.Manifest))

	r := archiveread.New(db.Pool, st, s3.Service, archiveTables())
	f, err := r.Row(ctx, "rule_evaluations", rowID, "ops:dana")
	require.NoError(t, err, "the version that matches the ledger is served")
	require.JSONEq(t, string(bytes.TrimSpace(data)), string(f.Row))
	var out bytes.Buffer
	sum, err := r.Range(ctx, &out, "rule_evaluations", at.Add(-time.Hour), at.Add(time.Hour), "ops:dana")
	require.NoError(t, err)
	require.Equal(t, 1, sum.ArchivedRows)
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.Len(t, lines, 2, "the row and the summary")
	require.JSONEq(t, string(bytes.TrimSpace(data)), string(lines[0]))

	rep, err := r.Verify(ctx, true, 0)
	require.NoError(t, err)
	require.Len(t, rep.Failures, 1, "one archive, restored (both objects: the manifest first)")
	require.Equal(t, archiveread.KindRestored, rep.Failures[0].Kind)
	rep, err = r.Verify(ctx, true, 0)
	require.NoError(t, err)
	require.Len(t, rep.Failures, 1)
	require.Equal(t, archiveread.KindRestored, rep.Failures[0].Kind, "the data, overwritten, is restored by the next pass")
	rep, err = r.Verify(ctx, true, 0)
	require.NoError(t, err)
	require.Empty(t, rep.Failures, "healed")
	cur, err := st.Get(ctx, keys.Data)
	require.NoError(t, err)
	require.Equal(t, data, cur)

	// Released and due, with a delete marker on top again: the purge
	// destroys every version and marker.
	require.NoError(t, raw.Delete(ctx, keys.Data))
	_, err = mgr.ReleaseHold(ctx, h.ID, "hearing closed", "ops:carol")
	require.NoError(t, err)
	db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE archive_id = $1`, id)
	res, err := mgr.Purge(ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{id}, res.Purged, "failed: %v", res.Failed)
	for _, key := range []string{keys.Data, keys.Manifest} {
		left, err := st.DestroyAllVersions(ctx, key)
		require.NoError(t, err)
		require.False(t, left, "%s: no version left", key)
	}
	_, _ = st.DestroyAllVersions(ctx, res.Certificate)
}

// TestThousandOverwrites (issue 22 finding 6, found by the hostile round):
// a listing of versions stops at 1,000 entries; a held archive overwritten
// 1,001 times is still served from its matching version, verify restores
// it, and the purge, once it is due, leaves no version behind (every page
// of versions is read).
func TestThousandOverwrites(t *testing.T) {
	t.Parallel()
	ctx, db, s3, st := scratchWorld(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	raw, err := blob.OpenBucket(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	at := time.Now().UTC().AddDate(0, 0, -400).Truncate(time.Microsecond)
	id, rowID := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	keys, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", at, id.String())
	require.NoError(t, err)
	data := []byte(`{"id": "` + rowID.String() + `", "evaluated_at": "` + at.Format(time.RFC3339Nano) + `"}` + "\n")
	m := archive.Manifest{ArchiveID: id, Table: "rule_evaluations", DataKey: keys.Data, ManifestKey: keys.Manifest,
		DataSHA256: archive.SHA256Hex(data), RecordCount: 1, Endpoint: st.Identity().Endpoint, Bucket: st.Identity().Bucket,
		FirstRecordID: rowID, LastRecordID: rowID, FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: at, ArchivedBy: archive.SystemActor}
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, keys.Data, data, store.ContentTypeNDJSON))
	require.NoError(t, st.PutCreate(ctx, keys.Manifest, mb, store.ContentTypeJSON))
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, m, archive.SystemActor)
	}))
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	mgr, err := lifecycle.New(db.Pool, st, lifecycle.Config{Service: s3.Service, ObjectLock: true}, slog.New(&kerneltest.LogRecorder{}), pm)
	require.NoError(t, err)
	h, err := mgr.PlaceHold(ctx, lifecycle.HoldRequest{Title: "hearing", Reason: "subpoena", ArchiveIDs: []uuid.UUID{id}}, "ops:carol")
	require.NoError(t, err)
	for i := range 1001 {
		require.NoError(t, raw.WriteAll(ctx, keys.Data, fmt.Appendf(nil, `{"id": "%s", "forged": %d}`+"\n", rowID, i), nil))
	}
	r := archiveread.New(db.Pool, st, s3.Service, archiveTables())
	f, err := r.Row(ctx, "rule_evaluations", rowID, "ops:dana")
	require.NoError(t, err, "served from the matching version, on the listing's second page")
	require.JSONEq(t, string(bytes.TrimSpace(data)), string(f.Row))
	rep, err := r.Verify(ctx, true, 0)
	require.NoError(t, err)
	require.Len(t, rep.Failures, 1)
	require.Equal(t, archiveread.KindRestored, rep.Failures[0].Kind)

	_, err = mgr.ReleaseHold(ctx, h.ID, "hearing closed", "ops:carol")
	require.NoError(t, err)
	db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE archive_id = $1`, id)
	res, err := mgr.Purge(ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{id}, res.Purged, "failed: %v", res.Failed)
	left, err := st.DestroyAllVersions(ctx, keys.Data)
	require.NoError(t, err)
	require.False(t, left, "no version of the purged data object is left")
	_, _ = st.DestroyAllVersions(ctx, res.Certificate)
}
