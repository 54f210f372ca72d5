package archive_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/migrations"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
)

const scratchTimeout = 2 * time.Minute

// itemsDDL is a small archived table with one column of each attribute the
// manifest's schema records, and a ledger the test bookkeeping writes.
const itemsDDL = `
CREATE TABLE %[1]s (
    id         uuid          PRIMARY KEY DEFAULT uuid_generate_v7(),
    created_at timestamptz   NOT NULL,
    label      varchar(20)   DEFAULT 'x',
    amount     numeric(12,2),
    body       text          NOT NULL DEFAULT ''
);
CREATE INDEX ON %[1]s (created_at, id);`

const ledgerDDL = `
CREATE TABLE test_ledger (
    archive_id      uuid PRIMARY KEY,
    table_name      text NOT NULL,
    data_key        text NOT NULL,
    manifest_key    text NOT NULL,
    record_count    int  NOT NULL,
    first_record_id uuid NOT NULL,
    last_record_id  uuid NOT NULL,
    archived_by     text NOT NULL
)`

// itemsSpec is the TableSpec of a test table, written as sqlc would write
// the two queries.
func itemsSpec(table string) archive.TableSpec {
	ident := pgx.Identifier{table}.Sanitize()
	selectSQL := `SELECT t.id, t.created_at, to_jsonb(t)::text FROM ` + ident + ` AS t
WHERE t.created_at < now() - make_interval(days => $1::int)
  AND (t.created_at, t.id) > ($2::timestamptz, $3::uuid)
ORDER BY t.created_at, t.id LIMIT $4::int`
	deleteSQL := `DELETE FROM ` + ident + ` WHERE id = ANY ($1::uuid[]) AND created_at < now() - make_interval(days => $2::int)`
	return archive.TableSpec{
		Table:     table,
		AgeColumn: "created_at",
		Select: func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
			rows, err := db.Query(ctx, selectSQL, p.HotWindowDays, p.After.At, p.After.ID, p.Limit)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(r pgx.CollectableRow) (archive.Row, error) {
				var row archive.Row
				err := r.Scan(&row.ID, &row.At, &row.Doc)
				return row, err
			})
		},
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			tag, err := tx.Exec(ctx, deleteSQL, ids, hot)
			return tag.RowsAffected(), err
		},
	}
}

// ledgerBookkeep records each archive in test_ledger.
func ledgerBookkeep(ctx context.Context, tx pgx.Tx, m archive.Manifest, by string) error {
	_, err := tx.Exec(ctx, `INSERT INTO test_ledger VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		m.ArchiveID, m.Table, m.DataKey, m.ManifestKey, m.RecordCount, m.FirstRecordID, m.LastRecordID, by)
	return err
}

type scratchEnv struct {
	db   *kerneltest.DB
	s3   *kerneltest.S3Scratch
	st   *store.Store
	reg  *prometheus.Registry
	m    *metrics.Archive
	logs *kerneltest.LogRecorder
}

// newScratchEnv is a scratch database (transport set, for
// uuid_generate_v7) with the given test tables and the ledger, and a
// scratch prefix on the real S3 server.
func newScratchEnv(t *testing.T, tables ...string) (context.Context, *scratchEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scratchTimeout)
	t.Cleanup(cancel)
	db := kerneltest.NewDB(t, migrations.Transport())
	for _, tbl := range tables {
		db.Exec(t, fmt.Sprintf(itemsDDL, pgx.Identifier{tbl}.Sanitize()))
	}
	db.Exec(t, ledgerDDL)
	s3 := kerneltest.NewS3Scratch(t)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	reg := prometheus.NewRegistry()
	m, err := metrics.NewArchive(reg)
	require.NoError(t, err)
	return ctx, &scratchEnv{db: db, s3: s3, st: st, reg: reg, m: m, logs: &kerneltest.LogRecorder{}}
}

func (e *scratchEnv) engine(t *testing.T, specs []archive.TableSpec, bk archive.BookkeepFunc, mutate func(*archive.Config)) *archive.Engine {
	t.Helper()
	cfg := archive.Config{Service: e.s3.Service, HotWindowDays: 90, BatchSize: 1000, MaxBatchBytes: archive.DefaultMaxBatchBytes}
	if mutate != nil {
		mutate(&cfg)
	}
	eng, err := archive.New(e.db.Pool, e.st, specs, bk, cfg, slog.New(e.logs), e.m)
	require.NoError(t, err)
	return eng
}

// seedItems inserts n rows created ageDays (plus i seconds) ago, with a body
// of bodyBytes ASCII bytes, and returns their ids oldest first.
func seedItems(t *testing.T, db *kerneltest.DB, table string, n, ageDays, bodyBytes int) []uuid.UUID {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		INSERT INTO `+pgx.Identifier{table}.Sanitize()+` (created_at, label, amount, body)
		SELECT now() - make_interval(days => $2::int) - make_interval(secs => $1::int - g),
		       'l' || g, (g * 1.10)::numeric(12,2), repeat('b', $3::int)
		FROM generate_series(1, $1::int) AS g
		RETURNING id, created_at`, n, ageDays, bodyBytes)
	require.NoError(t, err)
	type r struct {
		ID uuid.UUID
		At time.Time
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[r])
	require.NoError(t, err)
	slices.SortFunc(got, func(a, b r) int { return a.At.Compare(b.At) })
	ids := make([]uuid.UUID, len(got))
	for i, g := range got {
		ids[i] = g.ID
	}
	return ids
}

// docsOf returns id → to_jsonb text of every row of table.
func docsOf(t *testing.T, db *kerneltest.DB, table string) map[uuid.UUID]string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT t.id, to_jsonb(t)::text FROM `+pgx.Identifier{table}.Sanitize()+` AS t`)
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

// readArchive fetches an archive's objects, checks the manifest against the
// data, and returns the manifest and the NDJSON lines (without "\n").
func readArchive(ctx context.Context, t *testing.T, st *store.Store, ref archive.ArchiveRef) (archive.Manifest, []string) {
	t.Helper()
	data, err := st.Get(ctx, ref.DataKey)
	require.NoError(t, err)
	mb, err := st.Get(ctx, ref.ManifestKey)
	require.NoError(t, err)
	var m archive.Manifest
	require.NoError(t, json.Unmarshal(mb, &m))
	require.Equal(t, ref.ArchiveID, m.ArchiveID)
	require.Equal(t, archive.SHA256Hex(data), m.DataSHA256)
	require.Equal(t, ref.RecordCount, m.RecordCount)
	require.True(t, bytes.HasSuffix(data, []byte("\n")))
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	require.Len(t, lines, m.RecordCount)
	return m, lines
}

func lineID(t *testing.T, line string) uuid.UUID {
	t.Helper()
	var v struct {
		ID uuid.UUID `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &v), line)
	return v.ID
}

// withEndpoint is bucketURL with its endpoint option replaced.
func withEndpoint(t *testing.T, bucketURL, endpoint string) string {
	t.Helper()
	u, err := url.Parse(bucketURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("endpoint", endpoint)
	u.RawQuery = q.Encode()
	return u.String()
}

func ptrTo[T any](v T) *T { return &v }

// TestPassRoundTripManifestSchema: a pass over a table with every kind of
// column attribute writes the NDJSON verbatim and a manifest whose schema is
// the table's full column tuples.
func TestPassRoundTripManifestSchema(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t, "items")
	aged := seedItems(t, env.db, "items", 7, 100, 10)
	fresh := seedItems(t, env.db, "items", 3, 10, 10)
	before := docsOf(t, env.db, "items")
	eng := env.engine(t, []archive.TableSpec{itemsSpec("items")}, ledgerBookkeep, func(c *archive.Config) { c.HotWindowDays = 30 })

	rep, err := eng.RunPass(ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.False(t, rep.More)
	require.Len(t, rep.Tables, 1)
	require.Equal(t, int64(7), rep.Tables[0].Archived)
	require.Len(t, rep.Tables[0].Archives, 1)
	m, lines := readArchive(ctx, t, env.st, rep.Tables[0].Archives[0])

	for i, id := range aged {
		require.Equal(t, before[id], lines[i], "line %d is the row's to_jsonb text, oldest first", i)
	}
	wantCols := []archive.Column{
		{Name: "id", DataType: "uuid", Default: ptrTo("uuid_generate_v7()")},
		{Name: "created_at", DataType: "timestamp with time zone"},
		{Name: "label", DataType: "character varying", IsNullable: true, CharMaxLen: ptrTo[int32](20), Default: ptrTo("'x'::character varying")},
		{Name: "amount", DataType: "numeric", IsNullable: true, NumericPrecision: ptrTo[int32](12)},
		{Name: "body", DataType: "text", Default: ptrTo("''::text")},
	}
	require.Equal(t, wantCols, m.Columns)
	require.Equal(t, archive.Fingerprint(wantCols), m.Fingerprint)
	cols, err := archive.TableColumns(ctx, env.db.Pool, "items")
	require.NoError(t, err)
	require.Equal(t, wantCols, cols)

	id := env.st.Identity()
	require.Equal(t, archive.Format, m.Format)
	require.Equal(t, env.s3.Service, m.Service)
	require.Equal(t, "items", m.Table)
	require.Equal(t, id.Endpoint, m.Endpoint)
	require.Equal(t, id.Bucket, m.Bucket)
	require.NotEmpty(t, m.Endpoint)
	require.NotEmpty(t, m.Bucket)
	require.Equal(t, 30, m.HotWindowDays)
	require.Equal(t, archive.SystemActor, m.ArchivedBy)
	require.Equal(t, byte(7), m.ArchiveID[6]>>4, "archive ids are UUIDv7")
	require.True(t, strings.HasPrefix(m.DataKey, env.s3.Prefix()+"items/"+m.ArchivedAt.Format("2006/01/02")+"/"+m.ArchiveID.String()))
	require.Equal(t, []string{m.DataKey, m.ManifestKey}, []string{rep.Tables[0].Archives[0].DataKey, rep.Tables[0].Archives[0].ManifestKey})

	require.Equal(t, int64(3), env.db.Count(t, `SELECT count(*) FROM items`))
	for _, id := range fresh {
		require.Equal(t, int64(1), env.db.Count(t, `SELECT count(*) FROM items WHERE id = $1`, id))
	}
	require.Equal(t, int64(1), env.db.Count(t, `SELECT count(*) FROM test_ledger WHERE archive_id = $1 AND archived_by = $2`, m.ArchiveID, archive.SystemActor))
	require.Equal(t, 7.0, testutil.ToFloat64(env.m.RowsArchived.WithLabelValues("items")))
	require.Positive(t, testutil.ToFloat64(env.m.LastSuccess.WithLabelValues(env.s3.Service)))
	require.ElementsMatch(t, []string{m.DataKey, m.ManifestKey}, env.s3.Keys(t), "a pass writes exactly its two objects")
}

// TestQuarantineBoundary: a row whose NDJSON line is exactly max_batch_bytes
// is archived alone; one byte more and it is quarantined, and the pass goes
// on to the rows after it.
func TestQuarantineBoundary(t *testing.T) {
	t.Parallel()
	const maxBytes = 4096
	tests := []struct {
		name            string
		extra           int // line length - maxBytes
		wantQuarantined int
	}{
		{"line of exactly max bytes", 0, 0},
		{"line one byte over", 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, env := newScratchEnv(t, "items")
			// The line length is the doc's plus "\n"; measure the doc of an
			// empty body at the same timestamp, then pad the body.
			at := time.Now().UTC().Truncate(time.Second).AddDate(0, 0, -100)
			var emptyLen int
			require.NoError(t, env.db.Pool.QueryRow(ctx, `
				WITH p AS (INSERT INTO items (created_at, label, amount, body) VALUES ($1, 'big', 1.00, '') RETURNING *)
				SELECT octet_length(to_jsonb(p)::text) FROM p`, at).Scan(&emptyLen))
			env.db.Exec(t, `UPDATE items SET body = repeat('b', $1::int) WHERE label = 'big'`, maxBytes-1-emptyLen+tt.extra)
			var big uuid.UUID
			var lineLen int
			require.NoError(t, env.db.Pool.QueryRow(ctx, `SELECT id, octet_length(to_jsonb(items)::text) + 1 FROM items WHERE label = 'big'`).Scan(&big, &lineLen))
			require.Equal(t, maxBytes+tt.extra, lineLen)
			small := seedItems(t, env.db, "items", 3, 99, 10) // younger than the big row: after it in the pass

			eng := env.engine(t, []archive.TableSpec{itemsSpec("items")}, ledgerBookkeep, func(c *archive.Config) { c.MaxBatchBytes = maxBytes })
			rep, err := eng.RunPass(ctx, 10)
			require.NoError(t, err)
			require.NoError(t, rep.Err())
			require.False(t, rep.More)
			tr := rep.Tables[0]
			require.Equal(t, tt.wantQuarantined, tr.Quarantined)
			require.Equal(t, float64(tt.wantQuarantined), testutil.ToFloat64(env.m.Quarantined.WithLabelValues("items")))
			require.Equal(t, int64(3+1-tt.wantQuarantined), tr.Archived)
			var archived []uuid.UUID
			for _, ref := range tr.Archives {
				data, err := env.st.Get(ctx, ref.DataKey)
				require.NoError(t, err)
				require.LessOrEqual(t, len(data), maxBytes)
				_, lines := readArchive(ctx, t, env.st, ref)
				for _, l := range lines {
					archived = append(archived, lineID(t, l))
				}
			}
			warns := env.logs.Entries(slog.LevelWarn, "quarantined")
			if tt.wantQuarantined == 0 {
				require.Equal(t, append([]uuid.UUID{big}, small...), archived)
				require.Empty(t, warns)
				require.Zero(t, env.db.Count(t, `SELECT count(*) FROM items`))
				return
			}
			require.Equal(t, small, archived)
			require.Len(t, warns, 1)
			require.Equal(t, big.String(), warns[0]["id"])
			require.Equal(t, "items", warns[0]["table"])
			require.Equal(t, int64(maxBytes+1), warns[0]["row_bytes"])
			require.Equal(t, int64(1), env.db.Count(t, `SELECT count(*) FROM items WHERE id = $1`, big), "a quarantined row stays")
		})
	}
}

// TestRoundRobinAcrossTables: batches alternate between tables, and a budget
// that runs out with rows left reports more.
func TestRoundRobinAcrossTables(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t, "items", "others")
	seedItems(t, env.db, "items", 4, 100, 10)
	seedItems(t, env.db, "others", 4, 100, 10)
	eng := env.engine(t, []archive.TableSpec{itemsSpec("items"), itemsSpec("others")}, ledgerBookkeep, func(c *archive.Config) { c.BatchSize = 2 })

	rep, err := eng.RunPass(ctx, 3)
	require.NoError(t, err)
	require.True(t, rep.More)
	require.Equal(t, int64(4), rep.Tables[0].Archived, "items: batches 1 and 3")
	require.Equal(t, int64(2), rep.Tables[1].Archived, "others: batch 2")
	var order []string
	rows, err := env.db.Pool.Query(ctx, `SELECT table_name FROM test_ledger ORDER BY archive_id`) // UUIDv7: creation order
	require.NoError(t, err)
	order, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"items", "others", "items"}, order)
	// The backlog left past the hot window (90 days): others' two rows of
	// 100 days, and nothing of items.
	require.Greater(t, testutil.ToFloat64(env.m.Backlog.WithLabelValues("others")), (99 * 24 * time.Hour).Seconds())
	require.Zero(t, testutil.ToFloat64(env.m.Backlog.WithLabelValues("items")))

	rep, err = eng.RunPass(ctx, 10)
	require.NoError(t, err)
	require.False(t, rep.More)
	require.Equal(t, int64(0), rep.Tables[0].Archived)
	require.Equal(t, int64(2), rep.Tables[1].Archived)
	require.Zero(t, env.db.Count(t, `SELECT (SELECT count(*) FROM items) + (SELECT count(*) FROM others)`))
	require.Zero(t, testutil.ToFloat64(env.m.Backlog.WithLabelValues("others")), "drained: no backlog")
}

// TestStoreFailureDeletesNothing: when the store refuses the put, the pass
// reports ErrStore for the table, and no row is deleted or booked.
func TestStoreFailureDeletesNothing(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t, "items")
	seedItems(t, env.db, "items", 5, 100, 10)
	u, err := url.Parse(env.s3.URL)
	require.NoError(t, err)
	u.Host = "no-such-bucket-" + env.s3.Service
	missing, err := store.Open(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = missing.Close() })
	booked := false
	eng, err := archive.New(env.db.Pool, missing, []archive.TableSpec{itemsSpec("items")},
		func(context.Context, pgx.Tx, archive.Manifest, string) error { booked = true; return nil },
		archive.Config{Service: env.s3.Service, HotWindowDays: 90, BatchSize: 100, MaxBatchBytes: 1 << 20}, slog.New(env.logs), env.m)
	require.NoError(t, err)

	rep, err := eng.RunPass(ctx, 5)
	require.NoError(t, err, "table failures are in the report")
	require.False(t, rep.More, "an error-stopped table reports no more")
	require.ErrorIs(t, rep.Tables[0].Err, archive.ErrStore)
	require.ErrorIs(t, rep.Err(), archive.ErrStore)
	require.NotNil(t, rep.Tables[0].Error)
	require.Zero(t, rep.Tables[0].Archived)
	require.False(t, booked)
	require.Equal(t, int64(5), env.db.Count(t, `SELECT count(*) FROM items`))
	require.Equal(t, 1.0, testutil.ToFloat64(env.m.Failures.WithLabelValues("items", "store")))
	require.Zero(t, testutil.ToFloat64(env.m.LastSuccess.WithLabelValues(env.s3.Service)), "no success stamp for a pass with a table error")
	require.Len(t, env.logs.Entries(slog.LevelError, "archive batch failed"), 1)
}

// TestCancellationBetweenBatches: a cancelled pass stops before its next
// batch; the committed batch stays committed and the rest stays in place.
func TestCancellationBetweenBatches(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t, "items")
	seedItems(t, env.db, "items", 6, 100, 10)
	passCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	env.logs.SetHook(func(r slog.Record) {
		if r.Message == "archived rows" {
			cancel() // between the first batch's commit and the next batch
		}
	})
	eng := env.engine(t, []archive.TableSpec{itemsSpec("items")}, ledgerBookkeep, func(c *archive.Config) { c.BatchSize = 2 })
	rep, err := eng.RunPass(passCtx, 10)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int64(2), rep.Tables[0].Archived)
	require.Equal(t, int64(1), env.db.Count(t, `SELECT count(*) FROM test_ledger`))
	require.Equal(t, int64(4), env.db.Count(t, `SELECT count(*) FROM items`))
}

// TestCancellationAtTheCommit: a cancel arriving once a batch's delete and
// booking have run does not stop its COMMIT: the batch is archived, booked
// and reported, and the pass stops before the next one.
func TestCancellationAtTheCommit(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t, "items")
	seedItems(t, env.db, "items", 6, 100, 10)
	passCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	bookThenCancel := func(ctx context.Context, tx pgx.Tx, m archive.Manifest, by string) error {
		err := ledgerBookkeep(ctx, tx, m, by)
		cancel() // the transaction's statements are done; its COMMIT is next
		return err
	}
	eng := env.engine(t, []archive.TableSpec{itemsSpec("items")}, bookThenCancel, func(c *archive.Config) { c.BatchSize = 2 })
	rep, err := eng.RunPass(passCtx, 10)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int64(2), rep.Tables[0].Archived, "the batch whose COMMIT was under way is reported")
	require.NoError(t, rep.Tables[0].Err)
	require.Equal(t, int64(1), env.db.Count(t, `SELECT count(*) FROM test_ledger`))
	require.Equal(t, int64(4), env.db.Count(t, `SELECT count(*) FROM items`))
	require.Empty(t, env.logs.Entries(slog.LevelError, "archive batch failed"))
}

// TestWorkerRunsScheduledPasses: the worker's passes archive the backlog and
// stamp the success gauge; cancelling its context stops it cleanly.
func TestWorkerRunsScheduledPasses(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t, "items")
	seedItems(t, env.db, "items", 9, 100, 10)
	eng := env.engine(t, []archive.TableSpec{itemsSpec("items")}, ledgerBookkeep, func(c *archive.Config) { c.BatchSize = 2 })
	// Budget 2 per pass: the 9 rows need three passes.
	w, err := archive.NewWorker(true, eng, 100*time.Millisecond, 2, slog.New(env.logs))
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	require.Eventually(t, func() bool {
		return env.db.Count(t, `SELECT count(*) FROM items`) == 0
	}, time.Minute, 20*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	require.Equal(t, 9.0, testutil.ToFloat64(env.m.RowsArchived.WithLabelValues("items")))
	require.Positive(t, testutil.ToFloat64(env.m.LastSuccess.WithLabelValues(env.s3.Service)))
	require.Equal(t, int64(5), env.db.Count(t, `SELECT count(*) FROM test_ledger WHERE archived_by = $1`, archive.SystemActor))
}

// TestBootProbesTheRealStore: enabled against the real S3 server, Boot runs
// the write/read/delete probe and leaves no probe object behind.
func TestBootProbesTheRealStore(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t)
	s := archive.DefaultSettings()
	s.Enabled, s.Store.URL = true, env.s3.URL
	st, err := archive.Boot(ctx, env.s3.Service, s)
	require.NoError(t, err)
	require.NoError(t, st.Close())
	key, err := store.ProbeKey(env.s3.Service)
	require.NoError(t, err)
	_, err = env.st.Get(ctx, key)
	require.ErrorIs(t, err, store.ErrNotFound)
	// A leftover probe from an interrupted boot does not block the next.
	// (versitygw's posix backend may still be removing the probe's path:
	// ErrConflict, nothing written, the caller may retry.)
	for try := 0; ; try++ {
		err := env.st.PutCreate(ctx, key, []byte("stale"), "text/plain")
		if !errors.Is(err, store.ErrConflict) || try == 20 {
			require.NoError(t, err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, archive.Probe(ctx, env.st, env.s3.Service))
	require.Empty(t, env.s3.Keys(t))

	// Store down: the probe fails and boot names the knobs.
	s.Store.URL = withEndpoint(t, env.s3.URL, "http://127.0.0.1:1")
	st, err = archive.Boot(ctx, env.s3.Service, s)
	require.Nil(t, st)
	require.ErrorIs(t, err, archive.ErrProbe)
	up := "CRAIG_" + strings.ToUpper(env.s3.Service)
	require.ErrorContains(t, err, up+"__ARCHIVE__ENABLED")
	require.ErrorContains(t, err, up+"__ARCHIVE__STORE__URL")
	if errors.Is(err, archive.ErrLocalBackend) {
		t.Fatal("an unreachable S3 store is not the local backend")
	}
}

// TestProbeConcurrentReplicas: replicas of one service booting together
// probe the same key; every one of them passes (none deletes another's live
// probe object) and the key is free afterwards.
func TestProbeConcurrentReplicas(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t)
	const rounds, replicas = 20, 4
	for round := range rounds {
		errs := make([]error, replicas)
		var wg sync.WaitGroup
		for i := range replicas {
			wg.Go(func() { errs[i] = archive.Probe(ctx, env.st, env.s3.Service) })
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d replica %d", round, i)
		}
	}
	require.Empty(t, env.s3.Keys(t))
}

// TestProbeWaitsForALiveProbeAndClearsLeftovers: a probe object written
// moments ago by another replica is waited for, never deleted; one written
// long ago (an interrupted boot) or not by a probe is cleared.
func TestProbeWaitsForALiveProbeAndClearsLeftovers(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t)
	key, err := store.ProbeKey(env.s3.Service)
	require.NoError(t, err)

	live := []byte("craig retention probe " + time.Now().UTC().Format(time.RFC3339Nano) + " other-replica")
	require.NoError(t, env.st.PutCreate(ctx, key, live, "text/plain"))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = archive.Probe(short, env.st, env.s3.Service)
	cancel()
	require.ErrorIs(t, err, archive.ErrProbe)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	got, err := env.st.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, live, got, "another replica's live probe is not touched")
	_, err = env.st.DeleteIfExists(ctx, key) // the other replica finishes
	require.NoError(t, err)
	require.NoError(t, archive.Probe(ctx, env.st, env.s3.Service))

	// A plain DELETE (an operator's tool, an archiver from before versioned
	// buckets) leaves a delete marker over the key, which this store keeps
	// counting as taken: the probe clears it instead of waiting it out.
	raw, err := blob.OpenBucket(ctx, env.s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	require.NoError(t, env.st.PutCreate(ctx, key, []byte("craig retention probe "+time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano)+" old"), "text/plain"))
	require.NoError(t, raw.Delete(ctx, key))
	within, cancelWithin := context.WithTimeout(ctx, 5*time.Second) // waiting it out takes 15 s and fails
	require.NoError(t, archive.Probe(within, env.st, env.s3.Service), "a delete marker over the probe key")
	cancelWithin()
	n, err := env.st.VersionCount(ctx, key)
	require.NoError(t, err)
	require.Zero(t, n, "no version or marker of the probe key is left")

	for _, leftover := range []string{
		"craig retention probe " + time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano) + " crashed",
		"craig retention probe " + time.Now().UTC().Add(time.Hour).Format(time.RFC3339Nano) + " skewed",
		"craig retention probe 2026-07-26T00:00:00Z", // the format before the replica fix
		"not a probe",
	} {
		require.NoError(t, env.st.PutCreate(ctx, key, []byte(leftover), "text/plain"))
		require.NoError(t, archive.Probe(ctx, env.st, env.s3.Service), leftover)
		_, err := env.st.Get(ctx, key)
		require.ErrorIs(t, err, store.ErrNotFound, leftover)
	}
}

// TestProbeReplicasOverDeleteMarkers: eight replicas, each with its own
// client, boot together over a probe key that plain DELETEs left one to
// three delete markers on (over a leftover every other round): every one
// of them starts, and nothing of the key is left. The clears race each
// other there (the store refuses a version another delete took first, and
// lists for a moment one it has just deleted); before the destroy settled
// its races, about one run in two had a replica refuse to boot.
func TestProbeReplicasOverDeleteMarkers(t *testing.T) {
	t.Parallel()
	ctx, env := newScratchEnv(t)
	key, err := store.ProbeKey(env.s3.Service)
	require.NoError(t, err)
	raw, err := blob.OpenBucket(ctx, env.s3.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	var client *s3.Client // plain DELETEs, as an operator's tool sends them (blob's Delete refuses a key that reads as absent)
	require.True(t, raw.As(&client))
	bucket, err := url.Parse(env.s3.URL)
	require.NoError(t, err)
	const rounds, replicas = 6, 8
	for round := range rounds {
		if round%2 == 1 {
			leftover := "craig retention probe " + time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano) + " crashed"
			require.NoError(t, raw.WriteAll(ctx, key, []byte(leftover), nil))
		}
		for range 1 + round%3 {
			_, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket.Host), Key: aws.String(key)})
			require.NoError(t, err) // a delete marker (over the leftover, or over the last one)
		}
		errs := make([]error, replicas)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range replicas {
			wg.Go(func() {
				<-start
				st, err := store.Open(ctx, env.s3.URL)
				if err != nil {
					errs[i] = err
					return
				}
				defer func() { _ = st.Close() }()
				errs[i] = archive.Probe(ctx, st, env.s3.Service)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d replica %d", round, i)
		}
		n, err := env.st.VersionCount(ctx, key)
		require.NoError(t, err)
		require.Zero(t, n, "round %d: no version or marker of the probe key is left", round)
	}
}
