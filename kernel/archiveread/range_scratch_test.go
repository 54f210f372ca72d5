package archiveread_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/store"
)

// bookOne books an archive of one row whose age is ageJSON (the archived
// document's evaluated_at) and first/last at.
func bookOne(ctx context.Context, t *testing.T, db *kerneltest.DB, st *store.Store, svc string, at time.Time, ageJSON string) (uuid.UUID, uuid.UUID) {
	t.Helper()
	id, rowID := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	keyAt := at
	if keyAt.Year() < 1000 {
		keyAt = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	keys, err := store.NewArchiveKeys(svc, "rule_evaluations", keyAt, id.String())
	require.NoError(t, err)
	data := []byte(`{"id": "` + rowID.String() + `", "evaluated_at": ` + ageJSON + `, "rule_id": "r"}` + "\n")
	m := archive.Manifest{ArchiveID: id, Table: "rule_evaluations", DataKey: keys.Data, ManifestKey: keys.Manifest,
		DataSHA256: archive.SHA256Hex(data), RecordCount: 1, Endpoint: st.Identity().Endpoint, Bucket: st.Identity().Bucket,
		FirstRecordID: rowID, LastRecordID: rowID, FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: time.Now().UTC(), ArchivedBy: archive.SystemActor}
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, keys.Data, data, store.ContentTypeNDJSON))
	require.NoError(t, st.PutCreate(ctx, keys.Manifest, mb, store.ContentTypeJSON))
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, m, archive.SystemActor)
	}))
	return id, rowID
}

func rangeRead(ctx context.Context, t *testing.T, r *archiveread.Reader, from, to time.Time) (archiveread.RangeSummary, string) {
	t.Helper()
	var out bytes.Buffer
	sum, err := r.Range(ctx, &out, "rule_evaluations", from, to, "ops:dana")
	require.NoError(t, err)
	return sum, out.String()
}

// TestRangeBoundaryBetweenMicroseconds: a bound
// between two microseconds splits ranges the way PostgreSQL sees them, so a
// row archived at X, and one still hot at X, appear exactly once across
// [X-1h, X+0.5µs) and [X+0.5µs, X+1h) (the archived one was in neither).
func TestRangeBoundaryBetweenMicroseconds(t *testing.T) {
	t.Parallel()
	ctx, db, s3, st := scratchWorld(t)
	X := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	_, rowID := bookOne(ctx, t, db, st, s3.Service, X, `"2024-03-01T12:00:00+00:00"`)
	hotID := uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO rule_evaluations (id, evaluated_at, rule_id, input, output) VALUES ($1, $2, 'r', '{}', '{}')`, hotID, X)
	r := archiveread.New(db.Pool, st, s3.Service, archiveTables())
	b := X.Add(500 * time.Nanosecond)
	s1, o1 := rangeRead(ctx, t, r, X.Add(-time.Hour), b)
	s2, o2 := rangeRead(ctx, t, r, b, X.Add(time.Hour))
	require.Equal(t, 1, s1.ArchivedRows+s2.ArchivedRows, "the summaries count it once")
	arch := bytes.Count([]byte(o1+o2), []byte(rowID.String()))
	hot := bytes.Count([]byte(o1+o2), []byte(hotID.String()))
	require.Equal(t, 1, hot, "hot row at X appears once across the two tiles")
	require.Equal(t, 1, arch, "archived row at X appears once across the two tiles")
}

// TestRangeReadsBCRows: a range naming year 0000
// (1 BC) returns the archived row of 1 BC (it was skipped, the summary
// complete all the same) as well as the hot one.
func TestRangeReadsBCRows(t *testing.T) {
	t.Parallel()
	ctx, db, s3, st := scratchWorld(t)
	X := time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC)       // astronomical year 0 = 1 BC
	clamped := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC) // what the engine books (Row.At clamped to year 1)
	_, rowID := bookOne(ctx, t, db, st, s3.Service, clamped, `"0001-06-01T00:00:00+00:00 BC"`)
	hotID := uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO rule_evaluations (id, evaluated_at, rule_id, input, output) VALUES ($1, $2, 'r', '{}', '{}')`, hotID, X)
	r := archiveread.New(db.Pool, st, s3.Service, archiveTables())
	from, err := time.Parse(time.RFC3339Nano, "0000-01-01T00:00:00Z")
	require.NoError(t, err)
	to, err := time.Parse(time.RFC3339Nano, "0001-01-02T00:00:00Z")
	require.NoError(t, err)
	s, o := rangeRead(ctx, t, r, from, to)
	require.Contains(t, o, hotID.String(), "the hot row")
	require.Contains(t, o, rowID.String(), "the archived row (archive was read: %v, complete %v)", s.Archives, s.Complete)
}
