package kerneltest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
)

// archiveSpecTimeout bounds one archived table's round trip.
const archiveSpecTimeout = 2 * time.Minute

// checkArchived is CheckSpec's property for one archived table: on a
// scratch database (db) seeded with seed (rows on both sides of
// the default hot window) and a scratch prefix of the real store, one pass
// archives exactly the aged rows (and the table has its insert-only
// trigger): every one is in an object (its line, by
// id), the object's sha256 is its manifest's, every archive has its ledger
// row, and no aged row is left while every hot one is.
func checkArchived(t *testing.T, db *DB, spec archive.TableSpec, bookkeep archive.BookkeepFunc, seed string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), archiveSpecTimeout)
	defer cancel()
	require.NoError(t, archive.CheckInsertOnly(ctx, db.Pool, []archive.TableSpec{spec}), "%s: archived tables are insert-only", spec.Table)
	db.Exec(t, seed)
	age := pgx.Identifier{spec.AgeColumn}.Sanitize()
	table := pgx.Identifier{spec.Table}.Sanitize()
	agedWhere := age + " < now() - make_interval(days => " + strconv.Itoa(archive.DefaultHotWindowDays) + ")"
	aged := db.Count(t, "SELECT count(*) FROM "+table+" WHERE "+agedWhere)
	total := db.Count(t, "SELECT count(*) FROM "+table)
	require.Positive(t, aged, "%s: the seed needs rows older than the hot window", spec.Table)
	require.Less(t, aged, total, "%s: the seed needs rows inside the hot window (they must be kept)", spec.Table)

	s3 := NewS3Scratch(t)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	m, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	eng, err := archive.New(db.Pool, st, []archive.TableSpec{spec}, bookkeep, archive.Config{
		Service: s3.Service, HotWindowDays: archive.DefaultHotWindowDays,
		BatchSize: archive.DefaultBatchSize, MaxBatchBytes: archive.DefaultMaxBatchBytes,
	}, slog.New(&LogRecorder{}), m)
	require.NoError(t, err)
	rep, err := eng.RunPass(ctx, archive.MaxManualBudget)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.False(t, rep.More)
	tr := rep.Tables[0]
	require.Equal(t, aged, tr.Archived, "%s: every aged row archived", spec.Table)
	require.Zero(t, db.Count(t, "SELECT count(*) FROM "+table+" WHERE "+agedWhere), "%s: no aged row left", spec.Table)
	require.Equal(t, total-aged, db.Count(t, "SELECT count(*) FROM "+table), "%s: every hot row kept", spec.Table)
	require.Equal(t, int64(len(tr.Archives)), db.Count(t, "SELECT count(*) FROM archive_ledger WHERE table_name = $1", spec.Table),
		"%s: a ledger row per archive", spec.Table)

	require.Equal(t, aged, checkObjects(ctx, t, db, st, table, tr), "%s: one line per archived row", spec.Table)
}

// checkObjects reads every archive of a pass's table report: the
// manifest's sha256 and count are the object's, and every line's row (by
// its id) is gone from the table. It returns the lines read.
func checkObjects(ctx context.Context, t *testing.T, db *DB, st *store.Store, table string, tr archive.TableReport) int64 {
	t.Helper()
	var lines int64
	for _, ref := range tr.Archives {
		data, err := st.Get(ctx, ref.DataKey)
		require.NoError(t, err)
		mb, err := st.Get(ctx, ref.ManifestKey)
		require.NoError(t, err)
		var man archive.Manifest
		require.NoError(t, json.Unmarshal(mb, &man))
		require.Equal(t, archive.SHA256Hex(data), man.DataSHA256, "%s: the manifest's sha256 is the object's", table)
		require.Equal(t, ref.RecordCount, man.RecordCount)
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, len(data)+1)
		for sc.Scan() {
			var row struct {
				ID uuid.UUID `json:"id"`
			}
			require.NoError(t, json.Unmarshal(sc.Bytes(), &row))
			require.Zero(t, db.Count(t, "SELECT count(*) FROM "+table+" WHERE id = $1", row.ID), "%s: an archived row is deleted", table)
			lines++
		}
		require.NoError(t, sc.Err())
	}
	return lines
}
