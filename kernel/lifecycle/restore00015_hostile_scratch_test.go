package lifecycle_test

import (
	"context"
	"io/fs"
	"log/slog"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/migrations"
)

// TestHostileRestoredBefore00015ThenMigrated: a ledger written (holds
// placed, one released, archives due, held and not) by a database at
// archive migration 00014, then migrated: both indexes exist and are
// valid, legal_hold equals archive_is_held on every row, the purge's dry
// run lists exactly the due unheld archives in order and a release then
// frees its archive for the purge.
func TestHostileRestoredBefore00015ThenMigrated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	old := fstest.MapFS{}
	entries, err := fs.ReadDir(migrations.Archive().FS, ".")
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() >= "00015" {
			continue
		}
		b, err := fs.ReadFile(migrations.Archive().FS, e.Name())
		require.NoError(t, err)
		old[e.Name()] = &fstest.MapFile{Data: b}
	}
	sets := kerneltest.ArchivingFixture()
	w := &world{ctx: ctx, db: kerneltest.NewDB(t, sets[0], sets[1], migrations.New(migrations.ArchiveSetName, old)), s3: kerneltest.NewS3Scratch(t)}
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM pg_indexes WHERE indexname IN ('archive_ledger_due_idx', 'archive_ledger_held_idx')`))
	w.st, err = store.Open(ctx, w.s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.st.Close() })
	w.m, err = metrics.NewPurge(prometheus.NewRegistry())
	require.NoError(t, err)
	w.mgr, err = lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)

	a, b, c, d := w.archived(t, 400, "CURRENT_DATE - 3"), w.archived(t, 401, "CURRENT_DATE - 1"), w.archived(t, 402, "CURRENT_DATE - 2"), w.archived(t, 403, "CURRENT_DATE + 5")
	hb, err := w.mgr.PlaceHold(ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{b.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	tbl := "rule_evaluations"
	from := c.LastRecordAt
	hc, err := w.mgr.PlaceHold(ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Table: &tbl, From: &from}, "ops:carol")
	require.NoError(t, err)
	_, err = w.mgr.ReleaseHold(ctx, hc.ID, "done", "ops:carol")
	require.NoError(t, err)
	_, err = w.mgr.PlaceHold(ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{c.ArchiveID}}, "ops:carol")
	require.NoError(t, err)

	_, err = migrate.Up(ctx, stdlib.OpenDBFromPool(w.db.Pool), kerneltest.ArchivingFixture(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, int64(2), w.db.Count(t, `SELECT count(*) FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
		WHERE c.relname IN ('archive_ledger_due_idx', 'archive_ledger_held_idx') AND i.indisvalid AND i.indisready`))
	require.Empty(t, disagreeing(t, w))
	res, err := w.mgr.Purge(ctx, 10, true, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{a.ArchiveID}, res.Candidates)
	_, err = w.mgr.ReleaseHold(ctx, hb.ID, "done", "ops:carol")
	require.NoError(t, err)
	require.Empty(t, disagreeing(t, w))
	res, err = w.mgr.Purge(ctx, 10, true, "ops:alice")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{a.ArchiveID, b.ArchiveID}, res.Candidates, "retention_until order")
	_ = d
}
