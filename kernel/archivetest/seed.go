package archivetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/store"
)

// ID is the deterministic id of seeded row n: UUIDv7-shaped, ordered by n.
func ID(n int) uuid.UUID {
	var u uuid.UUID
	copy(u[:], []byte{0x01, 0x90, 0xa8, 0xa0, 0, 0, 0x70, 0, 0x80, 0})
	for i := 15; n > 0 && i >= 10; i-- {
		u[i] = byte(n)
		n >>= 8
	}
	return u
}

// ages returns the age in seconds of rows aged ageDays plus mins[i]
// minutes, with a fraction of a second that differs per row (so the
// microseconds of the age column round-trip too).
func ages(ns, mins []int32, ageDays int) []float64 {
	out := make([]float64, len(ns))
	for i, n := range ns {
		out[i] = float64(ageDays)*86400 + float64(mins[i])*60 + float64(n%60)/7.0
	}
	return out
}

// insert runs the table's seed for rows ns[i] aged ageDays plus mins[i]
// minutes with pad bytes of padding; it reports errors instead of failing
// the test, so that other goroutines may call it.
func (e *env) insert(ctx context.Context, ns, mins []int32, ageDays, pad int) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(ns))
	pads := make([]int32, len(ns))
	for i, n := range ns {
		ids[i] = ID(int(n))
		pads[i] = int32(pad)
	}
	tag, err := e.h.Pool.Exec(ctx, e.table.Seed, ids, ages(ns, mins, ageDays), pads)
	if err != nil {
		return nil, fmt.Errorf("%s seed: %w", e.table.Spec.Table, err)
	}
	if tag.RowsAffected() != int64(len(ns)) {
		return nil, fmt.Errorf("%s seed inserted %d rows of %d", e.table.Spec.Table, tag.RowsAffected(), len(ns))
	}
	return ids, nil
}

// seed inserts the rows numbered from..to-1, row n aged ageDays plus n
// minutes (a larger n is OLDER while its id is LARGER: id order runs
// against age order), and returns their ids.
func (e *env) seed(t testing.TB, from, to, ageDays, pad int) []uuid.UUID {
	t.Helper()
	var ns []int32
	for n := from; n < to; n++ {
		ns = append(ns, int32(n))
	}
	ids, err := e.insert(e.ctx, ns, ns, ageDays, pad)
	require.NoError(t, err)
	return ids
}

// seedAt inserts row n aged exactly age (for the window's edges).
func (e *env) seedAt(t testing.TB, n int, age time.Duration) uuid.UUID {
	t.Helper()
	id := ID(n)
	_, err := e.h.Pool.Exec(e.ctx, e.table.Seed, []uuid.UUID{id}, []float64{age.Seconds()}, []int32{0})
	require.NoError(t, err)
	return id
}

// Querier runs a query (a pool, a connection or a transaction).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Docs returns id → to_jsonb text of the rows of table a WHERE clause
// (over alias t) selects: what an archive line must be, verbatim.
func Docs(ctx context.Context, t testing.TB, db Querier, table, where string, args ...any) map[uuid.UUID]string {
	t.Helper()
	rows, err := db.Query(ctx, "SELECT t.id, to_jsonb(t)::text FROM "+pgx.Identifier{table}.Sanitize()+" AS t WHERE "+where, args...)
	require.NoError(t, err)
	out := map[uuid.UUID]string{}
	for rows.Next() {
		var id uuid.UUID
		var doc string
		require.NoError(t, rows.Scan(&id, &doc))
		out[id] = doc
	}
	require.NoError(t, rows.Err())
	return out
}

func (e *env) docs(t testing.TB, where string, args ...any) map[uuid.UUID]string {
	t.Helper()
	return Docs(e.ctx, t, e.h.Pool, e.table.Spec.Table, where, args...)
}

// ids returns the ids of every row in the table.
func (e *env) ids(t testing.TB) map[uuid.UUID]bool {
	t.Helper()
	out := map[uuid.UUID]bool{}
	for id := range e.docs(t, "true") {
		out[id] = true
	}
	return out
}

// Line is one NDJSON line with its id.
type Line struct {
	ID   uuid.UUID
	Text string
}

// ReadArchive fetches an archive's objects and checks the manifest against
// the data: it parses, names its keys, its sha256 is the data's, its count
// is the lines'.
func ReadArchive(ctx context.Context, t testing.TB, st *store.Store, dataKey, manifestKey string) (archive.Manifest, []byte, []Line) {
	t.Helper()
	data, err := st.Get(ctx, dataKey)
	require.NoError(t, err)
	mb, err := st.Get(ctx, manifestKey)
	require.NoError(t, err)
	var m archive.Manifest
	require.NoError(t, json.Unmarshal(mb, &m))
	require.Equal(t, dataKey, m.DataKey)
	require.Equal(t, manifestKey, m.ManifestKey)
	require.Equal(t, archive.SHA256Hex(data), m.DataSHA256, "manifest.data_sha256 is the data object's sha256")
	require.True(t, bytes.HasSuffix(data, []byte("\n")), "every line ends in a newline")
	var lines []Line
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		var v struct {
			ID uuid.UUID `json:"id"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v))
		lines = append(lines, Line{ID: v.ID, Text: sc.Text()})
	}
	require.NoError(t, sc.Err())
	require.Len(t, lines, m.RecordCount)
	return m, data, lines
}

// archived reads every archive of a report's table.
func (e *env) archived(t testing.TB, tr archive.TableReport) []Line {
	t.Helper()
	var out []Line
	for _, ref := range tr.Archives {
		m, _, lines := ReadArchive(e.ctx, t, e.h.Store, ref.DataKey, ref.ManifestKey)
		require.Equal(t, ref.ArchiveID, m.ArchiveID)
		require.Equal(t, ref.RecordCount, m.RecordCount)
		out = append(out, lines...)
	}
	return out
}

// archivedIDs reads the ids of every archived line of a report's table.
func (e *env) archivedIDs(t testing.TB, tr archive.TableReport) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for _, l := range e.archived(t, tr) {
		ids = append(ids, l.ID)
	}
	return ids
}

// LedgerRow is one archive_ledger row.
type LedgerRow struct {
	ArchiveID     uuid.UUID
	TableName     string
	DataKey       string
	ManifestKey   string
	DataSHA256    string
	RecordCount   int32
	StoreEndpoint string
	StoreBucket   string
	FirstRecordID uuid.UUID
	LastRecordID  uuid.UUID
	FirstRecordAt time.Time
	LastRecordAt  time.Time
	HotWindowDays int32
	ArchivedAt    time.Time
	ArchivedBy    string
}

// Ledger returns every archive_ledger row, by archive id.
func Ledger(ctx context.Context, t testing.TB, db Querier) []LedgerRow {
	t.Helper()
	rows, err := db.Query(ctx, `
		SELECT archive_id, table_name, data_key, manifest_key, data_sha256, record_count,
		       store_endpoint, store_bucket, first_record_id, last_record_id,
		       first_record_at, last_record_at, hot_window_days, archived_at, archived_by
		FROM archive_ledger ORDER BY archive_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[LedgerRow])
	require.NoError(t, err)
	return out
}

func (e *env) ledger(t testing.TB) []LedgerRow {
	t.Helper()
	return Ledger(e.ctx, t, e.h.Pool)
}

// Event is one staged event_outbox row, its payload decoded with
// json.Number.
type Event struct {
	EventType string
	Payload   map[string]any
	Pending   bool
}

// Events returns every event_outbox row, oldest first.
func Events(ctx context.Context, t testing.TB, db Querier) []Event {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT event_type, payload::text, published_at IS NULL FROM event_outbox ORDER BY created_at, id`)
	require.NoError(t, err)
	var out []Event
	for rows.Next() {
		var ev Event
		var payload string
		require.NoError(t, rows.Scan(&ev.EventType, &payload, &ev.Pending))
		dec := json.NewDecoder(strings.NewReader(payload))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&ev.Payload))
		out = append(out, ev)
	}
	require.NoError(t, rows.Err())
	return out
}

func (e *env) events(t testing.TB) []Event {
	t.Helper()
	return Events(e.ctx, t, e.h.Pool)
}

func idSet(ids []uuid.UUID) map[uuid.UUID]bool {
	out := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}
