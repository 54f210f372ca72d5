//go:build scratch

package rules_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

const scratchTimeout = 3 * time.Minute

// rulesEnv is one test's rules database (every migration rules receives) and
// scratch prefix on the real S3 server.
type rulesEnv struct {
	db   *kerneltest.DB
	s3   *kerneltest.S3Scratch
	st   *store.Store
	m    *metrics.Archive
	logs *kerneltest.LogRecorder
}

func newRulesEnv(t testing.TB) (context.Context, *rulesEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scratchTimeout)
	t.Cleanup(cancel)
	db := kerneltest.ServiceDB(t, "rules")
	s3 := kerneltest.NewS3Scratch(t)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	m, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	return ctx, &rulesEnv{db: db, s3: s3, st: st, m: m, logs: &kerneltest.LogRecorder{}}
}

// engine builds an engine on the scratch database and prefix with the
// production defaults (hot window 90 d, batch 1000, 32 MiB) unless mutate
// says otherwise.
func (e *rulesEnv) engine(t testing.TB, specs []archive.TableSpec, bk archive.BookkeepFunc, mutate func(*archive.Config)) *archive.Engine {
	t.Helper()
	cfg := archive.Config{
		Service: e.s3.Service, HotWindowDays: archive.DefaultHotWindowDays,
		BatchSize: archive.DefaultBatchSize, MaxBatchBytes: archive.DefaultMaxBatchBytes,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	eng, err := archive.New(e.db.Pool, e.st, specs, bk, cfg, slog.New(e.logs), e.m)
	require.NoError(t, err)
	return eng
}

// evalID is the deterministic id of seeded evaluation n: UUIDv7-shaped,
// ordered by n.
func evalID(n int) uuid.UUID {
	return uuid.MustParse("0190a8a0-0000-7000-8000-" + leftPad(n))
}

func leftPad(n int) string {
	const digits = "0123456789abcdef"
	b := []byte("000000000000")
	for i := len(b) - 1; n > 0 && i >= 0; i-- {
		b[i] = digits[n%16]
		n /= 16
	}
	return string(b)
}

// seedSQL inserts one evaluation per element of $1 (sequence numbers n),
// id evalID(n), evaluated $2 days plus $4[i] minutes (and a few fractional
// seconds) ago, with numerics a float64 round trip would change, an escape,
// and $3 bytes of padding.
const seedSQL = `
INSERT INTO rule_evaluations (id, evaluated_at, rule_id, input, output)
SELECT ('0190a8a0-0000-7000-8000-' || lpad(to_hex(s.n), 12, '0'))::uuid,
       date_trunc('second', now()) - make_interval(days => $2::int) - make_interval(mins => s.mins)
           + make_interval(secs => s.n % 60 / 7.0),
       'rule-' || (s.n % 7),
       jsonb_build_object('case', s.n, 'amount', 1.10, 'big', 12345678901234567890.123456789,
                          'tiny', 0.1000000000000000055511151231257827, 'note', 'caf' || chr(233) || ' "q"',
                          'pad', repeat('p', $3::int)),
       ('{"eligible": ' || (s.n % 2 = 0)::text || ', "score": ' || (s.n * 1.10)::text || ', "limits": [1.10, 2.500, 1e-7, 1E+3]}')::jsonb
FROM unnest($1::int[], $4::int[]) AS s(n, mins)`

// seedEvaluations inserts the evaluations numbered from..to-1, evaluation n
// aged ageDays plus n minutes (a larger n is OLDER while its id is LARGER:
// id order runs against age order), and returns their ids.
func seedEvaluations(t testing.TB, db *kerneltest.DB, from, to, ageDays, padBytes int) []uuid.UUID {
	t.Helper()
	var ns []int32
	for n := from; n < to; n++ {
		ns = append(ns, int32(n))
	}
	ids, err := insertEvaluations(context.Background(), db, ns, ns, ageDays, padBytes)
	require.NoError(t, err)
	return ids
}

// insertEvaluations inserts evaluation ns[i] aged ageDays plus mins[i]
// minutes; it reports errors instead of failing the test, so that other
// goroutines may call it.
func insertEvaluations(ctx context.Context, db *kerneltest.DB, ns, mins []int32, ageDays, padBytes int) ([]uuid.UUID, error) {
	tag, err := db.Pool.Exec(ctx, seedSQL, ns, ageDays, padBytes, mins)
	if err != nil {
		return nil, err
	}
	if tag.RowsAffected() != int64(len(ns)) {
		return nil, fmt.Errorf("inserted %d evaluations of %d", tag.RowsAffected(), len(ns))
	}
	ids := make([]uuid.UUID, len(ns))
	for i, n := range ns {
		ids[i] = evalID(int(n))
	}
	return ids, nil
}

// docs returns id → to_jsonb text of the evaluations a WHERE clause selects.
func docs(t testing.TB, db *kerneltest.DB, where string, args ...any) map[uuid.UUID]string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT e.id, to_jsonb(e)::text FROM rule_evaluations AS e WHERE `+where, args...)
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

const agedWhere = `e.evaluated_at < now() - interval '90 days'`

// archiveLine is one NDJSON line with its id.
type archiveLine struct {
	id   uuid.UUID
	text string
}

// readArchive fetches an archive's objects and checks the manifest against
// the data: it parses, its sha256 is the data's, its count is the lines'.
func readArchive(ctx context.Context, t testing.TB, st *store.Store, dataKey, manifestKey string) (archive.Manifest, []byte, []archiveLine) {
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
	var lines []archiveLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		var v struct {
			ID uuid.UUID `json:"id"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v))
		lines = append(lines, archiveLine{id: v.ID, text: sc.Text()})
	}
	require.NoError(t, sc.Err())
	require.Len(t, lines, m.RecordCount)
	return m, data, lines
}

// archivedLines reads every archive of a report's table.
func archivedLines(ctx context.Context, t testing.TB, st *store.Store, tr archive.TableReport) []archiveLine {
	t.Helper()
	var out []archiveLine
	for _, ref := range tr.Archives {
		m, _, lines := readArchive(ctx, t, st, ref.DataKey, ref.ManifestKey)
		require.Equal(t, ref.ArchiveID, m.ArchiveID)
		require.Equal(t, ref.RecordCount, m.RecordCount)
		out = append(out, lines...)
	}
	return out
}

// ledgerRow is one archive_ledger row.
type ledgerRow struct {
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

func ledger(t testing.TB, db *kerneltest.DB) []ledgerRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT archive_id, table_name, data_key, manifest_key, data_sha256, record_count,
		       store_endpoint, store_bucket, first_record_id, last_record_id,
		       first_record_at, last_record_at, hot_window_days, archived_at, archived_by
		FROM archive_ledger ORDER BY archive_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ledgerRow])
	require.NoError(t, err)
	return out
}

// outboxEvent is one staged event_outbox row.
type outboxEvent struct {
	EventType string
	Payload   map[string]any
	Pending   bool
}

func outboxEvents(t testing.TB, db *kerneltest.DB) []outboxEvent {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT event_type, payload::text, published_at IS NULL FROM event_outbox ORDER BY created_at, id`)
	require.NoError(t, err)
	var out []outboxEvent
	for rows.Next() {
		var ev outboxEvent
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

func idSet(ids []uuid.UUID) map[uuid.UUID]bool {
	out := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}
