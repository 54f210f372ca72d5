package archiveread_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/store"
)

// TestHostileOrphansAcrossPages: more than 1,000 archive objects (half
// named by ledger rows, some of those purged), keys with more than 1,000
// versions (one orphan, one named) straddling the version listing's pages,
// an orphan behind a delete marker and objects that are no archive keys:
// the verify and a dry GC report exactly the unnamed archive objects, each
// once, and the walk hands each key once, in key order, at most WalkPage a
// page.
func TestHostileOrphansAcrossPages(t *testing.T) {
	_, db, s3, st := scratchWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	raw, err := blob.OpenBucket(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	ident := st.Identity()

	// One booked row to clone the rest from.
	seed := uuid.Must(uuid.NewV7())
	seedKeys, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", time.Now(), seed.String())
	require.NoError(t, err)
	at := time.Now().UTC().Truncate(time.Microsecond)
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, archive.Manifest{
			ArchiveID: seed, Table: "rule_evaluations", DataKey: seedKeys.Data, ManifestKey: seedKeys.Manifest, DataSHA256: archive.SHA256Hex([]byte("{}\n")),
			RecordCount: 1, Endpoint: ident.Endpoint, Bucket: ident.Bucket, FirstRecordID: seed, LastRecordID: seed,
			FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: at}, archive.SystemActor)
	}))
	book := func(id uuid.UUID, keys store.ArchiveKeys, purged bool) {
		db.Exec(t, `INSERT INTO archive_ledger SELECT (jsonb_populate_record(NULL::archive_ledger, to_jsonb(l) || jsonb_build_object(
				'archive_id', $2::uuid, 'data_key', $3::text, 'manifest_key', $4::text, 'purged_at', CASE WHEN $5::boolean THEN now() END))).*
			FROM archive_ledger AS l WHERE l.archive_id = $1`, seed, id, keys.Data, keys.Manifest, purged)
	}
	var orphans []string
	type job struct {
		keys   store.ArchiveKeys
		orphan bool
	}
	var jobs []job
	for i := range 560 {
		id := uuid.Must(uuid.NewV7())
		keys, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", time.Now(), id.String())
		require.NoError(t, err)
		switch i % 3 {
		case 0:
			orphans = append(orphans, keys.Data, keys.Manifest)
			jobs = append(jobs, job{keys, true})
		default:
			book(id, keys, i%3 == 2)
			jobs = append(jobs, job{keys, false})
		}
	}
	// Seed's objects too.
	jobs = append(jobs, job{seedKeys, false})
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs)*2)
	sem := make(chan struct{}, 8)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- st.PutCreate(ctx, j.keys.Data, []byte("{}\n"), store.ContentTypeNDJSON)
			errs <- st.PutCreate(ctx, j.keys.Manifest, []byte("{}"), store.ContentTypeJSON)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Objects under the prefix that are no archive keys.
	require.NoError(t, raw.WriteAll(ctx, store.Prefix+s3.Service+"/probe.txt", []byte("x"), nil))

	// A named key and an orphan key each with 1,001 versions.
	namedMany := jobs[1].keys.Data
	orphanMany := jobs[0].keys.Manifest
	for i := range 1001 {
		require.NoError(t, raw.WriteAll(ctx, namedMany, fmt.Appendf(nil, "{}\n%d\n", i), nil))
		require.NoError(t, raw.WriteAll(ctx, orphanMany, fmt.Appendf(nil, "{}%d", i), nil))
	}
	// An orphan hidden behind a delete marker, and a named key hidden too.
	require.NoError(t, raw.Delete(ctx, jobs[3].keys.Data))
	require.NoError(t, raw.Delete(ctx, jobs[4].keys.Data))
	slices.Sort(orphans)

	// The walk: every key once, sorted, pages of at most WalkPage.
	var walked []string
	require.NoError(t, st.WalkAllObjects(ctx, store.Prefix+s3.Service+"/", func(page []store.Object) error {
		require.LessOrEqual(t, len(page), store.WalkPage)
		require.NotEmpty(t, page)
		for _, o := range page {
			walked = append(walked, o.Key)
		}
		return nil
	}))
	require.True(t, slices.IsSorted(walked), "in key order")
	require.Equal(t, len(walked), len(slices.Compact(slices.Clone(walked))), "each key once")
	require.Len(t, walked, len(jobs)*2+1)

	later := archiveread.New(db.Pool, st, s3.Service, nil).WithClock(func() time.Time { return time.Now().Add(3 * 24 * time.Hour) })
	dry, err := later.CollectOrphans(ctx, 2, true, "ops:alice")
	require.NoError(t, err)
	got := slices.Clone(dry.Orphans)
	slices.Sort(got)
	require.Equal(t, orphans, got, "exactly the unnamed archive objects")
	vr, err := later.Verify(ctx, false, 0)
	require.NoError(t, err)
	require.Equal(t, len(orphans), vr.OrphanCount)
}

// TestHostileOrphanBookedDuringWalk: an archive whose booking is in flight
// while the verify walks (its objects written, as every booking writes them
// first, its ledger row not yet committed) is reported as an orphan (the
// GC's age bound keeps it; orphanObjects says so), and once its booking
// has committed no verify takes it for one.
func TestHostileOrphanBookedDuringWalk(t *testing.T) {
	ctx, db, s3, st := scratchWorld(t)
	ident := st.Identity()
	id := uuid.Must(uuid.NewV7())
	keys, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", time.Now(), id.String())
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, keys.Data, []byte("{}\n"), store.ContentTypeNDJSON))
	require.NoError(t, st.PutCreate(ctx, keys.Manifest, []byte("{}"), store.ContentTypeJSON))
	at := time.Now().UTC().Truncate(time.Microsecond)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	require.NoError(t, archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, archive.Manifest{
		ArchiveID: id, Table: "rule_evaluations", DataKey: keys.Data, ManifestKey: keys.Manifest, DataSHA256: archive.SHA256Hex([]byte("{}\n")),
		RecordCount: 1, Endpoint: ident.Endpoint, Bucket: ident.Bucket, FirstRecordID: id, LastRecordID: id,
		FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: at}, archive.SystemActor))
	rep, err := archiveread.New(db.Pool, st, s3.Service, nil).Verify(ctx, false, 0)
	require.NoError(t, err)
	require.Equal(t, 2, rep.OrphanCount, "in flight, its objects are named by no committed row: %v", rep.Orphans)
	require.NoError(t, tx.Commit(ctx))
	rep, err = archiveread.New(db.Pool, st, s3.Service, nil).Verify(ctx, false, 0)
	require.NoError(t, err)
	require.Zero(t, rep.OrphanCount, "booked, it is no orphan: %v", rep.Orphans)
}
