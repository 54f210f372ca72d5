package archiveread_test

import (
	"context"
	"encoding/json"
	"log/slog"
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
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
)

// TestCollectOrphans: only objects under the service's prefix that
// no LOCAL ledger row names, older than the bound, are collected — never a
// key a ledger row names (a purged archive's included); a dry run deletes
// nothing; a bound under a day is refused.
func TestCollectOrphans(t *testing.T) {
	t.Parallel()
	ctx, db, s3, st := scratchWorld(t)

	put := func(id uuid.UUID) store.ArchiveKeys {
		keys, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", time.Now(), id.String())
		require.NoError(t, err)
		require.NoError(t, st.PutCreate(ctx, keys.Data, []byte("{}\n"), store.ContentTypeNDJSON))
		require.NoError(t, st.PutCreate(ctx, keys.Manifest, []byte("{}"), store.ContentTypeJSON))
		return keys
	}
	named := uuid.Must(uuid.NewV7())
	namedKeys := put(named)
	at := time.Now().UTC().Truncate(time.Microsecond)
	ident := st.Identity()
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, archive.Manifest{
			ArchiveID: named, Table: "rule_evaluations", DataKey: namedKeys.Data, ManifestKey: namedKeys.Manifest, DataSHA256: archive.SHA256Hex([]byte("{}\n")),
			RecordCount: 1, Endpoint: ident.Endpoint, Bucket: ident.Bucket, FirstRecordID: named, LastRecordID: named,
			FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: at}, archive.SystemActor)
	}))
	db.Exec(t, `UPDATE archive_ledger SET purged_at = now(), purged_by = 'ops:x'`) // purged, but its keys are still named
	orphanKeys := put(uuid.Must(uuid.NewV7()))

	r := archiveread.New(db.Pool, st, s3.Service, nil)
	_, err := r.CollectOrphans(ctx, 0, true, "ops:alice")
	require.ErrorIs(t, err, archiveread.ErrGCInvalid)
	fresh, err := r.CollectOrphans(ctx, 1, false, "ops:alice")
	require.NoError(t, err)
	require.Empty(t, fresh.Orphans, "objects younger than the bound are never collected (a pass in flight)")

	later := r.WithClock(func() time.Time { return time.Now().Add(3 * 24 * time.Hour) })
	dry, err := later.CollectOrphans(ctx, 2, true, "ops:alice")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{orphanKeys.Data, orphanKeys.Manifest}, dry.Orphans)
	require.Empty(t, dry.Deleted)
	ok, err := st.Exists(ctx, orphanKeys.Data)
	require.NoError(t, err)
	require.True(t, ok, "a dry run deletes nothing")

	// Only the keys the operator was shown: a key that is not an orphan
	// (a ledger row names it) is never collected, whatever the request says.
	only, err := later.CollectOrphans(ctx, 2, false, "ops:alice", orphanKeys.Data, namedKeys.Data)
	require.NoError(t, err)
	require.Equal(t, []string{orphanKeys.Data}, only.Deleted)
	rep, err := later.CollectOrphans(ctx, 2, false, "ops:alice")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{orphanKeys.Manifest}, rep.Deleted)
	for key, want := range map[string]bool{orphanKeys.Data: false, orphanKeys.Manifest: false, namedKeys.Data: true, namedKeys.Manifest: true} {
		ok, err := st.Exists(ctx, key)
		require.NoError(t, err)
		require.Equal(t, want, ok, key)
	}
	for _, key := range []string{orphanKeys.Data, orphanKeys.Manifest} {
		n, err := st.VersionCount(ctx, key)
		require.NoError(t, err)
		require.Zero(t, n, "every version of %s is destroyed (a plain delete left them behind a marker)", key)
	}

	// An orphan another tool's plain delete hid behind a delete marker
	// still holds its bytes: verify and gc see it, and gc destroys it (on
	// main both listed current objects only).
	hidden := put(uuid.Must(uuid.NewV7()))
	raw, err := blob.OpenBucket(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	require.NoError(t, raw.Delete(ctx, hidden.Data)) // a delete marker on top
	n, err := st.VersionCount(ctx, hidden.Data)
	require.NoError(t, err)
	require.Equal(t, 2, n, "its version and the marker")
	vr, err := later.Verify(ctx, false, 0)
	require.NoError(t, err)
	require.Contains(t, vr.Orphans, hidden.Data)
	rep, err = later.CollectOrphans(ctx, 2, false, "ops:alice", hidden.Data)
	require.NoError(t, err)
	require.Equal(t, []string{hidden.Data}, rep.Deleted)
	n, err = st.VersionCount(ctx, hidden.Data)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, int64(3), db.Count(t, `SELECT count(*) FROM archive_lifecycle_log WHERE action = 'archive_orphans_collected' AND actor = 'ops:alice'`))
}

// TestScheduledVerifier: the scheduled verifier's first run is deep, counts
// each failure by kind and stamps its finish time; it stops with its context.
func TestScheduledVerifier(t *testing.T) {
	t.Parallel()
	ctx, db, s3, st := scratchWorld(t)
	id := uuid.Must(uuid.NewV7())
	keys, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", time.Now(), id.String())
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, keys.Data, []byte("{}\n"), store.ContentTypeNDJSON))
	at := time.Now().UTC().Truncate(time.Microsecond)
	m := archive.Manifest{ArchiveID: id, Table: "rule_evaluations", DataKey: keys.Data, ManifestKey: keys.Manifest,
		DataSHA256: archive.SHA256Hex([]byte("something else\n")), RecordCount: 1, Endpoint: st.Identity().Endpoint, Bucket: st.Identity().Bucket,
		FirstRecordID: id, LastRecordID: id, FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: at, ArchivedBy: archive.SystemActor}
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, keys.Manifest, mb, store.ContentTypeJSON))
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, m, archive.SystemActor)
	}))
	orphan, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", time.Now(), uuid.Must(uuid.NewV7()).String())
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, orphan.Data, []byte("{}\n"), store.ContentTypeNDJSON)) // a pass killed before its commit
	vm, err := metrics.NewVerify(prometheus.NewRegistry())
	require.NoError(t, err)
	r := archiveread.New(db.Pool, st, s3.Service, archiveTables())
	vctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.RunVerifier(vctx, 20*time.Millisecond, vm, slog.New(&kerneltest.LogRecorder{})); close(done) }()
	require.Eventually(t, func() bool { return testutil.ToFloat64(vm.Last) > 0 }, 30*time.Second, 10*time.Millisecond)
	stop()
	<-done
	require.GreaterOrEqual(t, testutil.ToFloat64(vm.Failures.WithLabelValues(archiveread.KindSHA256)), 1.0, "the first run is deep: the wrong sha256 is found")
	require.Equal(t, 1.0, testutil.ToFloat64(vm.Orphans.WithLabelValues()), "the orphan is counted (archive_orphan_objects)")
}

// archiveTables is rule_evaluations as the reader needs it (its age column).
func archiveTables() []archive.TableSpec {
	return []archive.TableSpec{{Table: "rule_evaluations", AgeColumn: "evaluated_at"}}
}

// scratchWorld is a test's rules database, scratch store prefix and store,
// bounded by a minute.
func scratchWorld(t *testing.T) (context.Context, *kerneltest.DB, *kerneltest.S3Scratch, *store.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db := kerneltest.NewDB(t, kerneltest.ArchivingFixture()...)
	s3 := kerneltest.NewS3Scratch(t)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return ctx, db, s3, st
}
