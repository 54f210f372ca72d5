package rules_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
	"github.com/google/uuid"
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
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
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

// rulesSeed is rule_evaluations' archivetest seed ($1 ids, $2 ages in
// seconds, $3 padding bytes): numerics a float64 round trip would change,
// an escape, and the padding in input.pad.
const rulesSeed = `
INSERT INTO rule_evaluations (id, evaluated_at, rule_id, input, output)
SELECT s.id, now() - make_interval(secs => s.age), 'rule-' || (s.ord % 7),
       jsonb_build_object('case_id', s.ord, 'amount', 1.10, 'big', 12345678901234567890.123456789,
                          'tiny', 0.1000000000000000055511151231257827, 'note', 'caf' || chr(233) || ' "q"',
                          'pad', repeat('p', s.pad)),
       ('{"eligible": ' || (s.ord % 2 = 0)::text || ', "score": ' || (s.ord * 1.10)::text || ', "limits": [1.10, 2.500, 1e-7, 1E+3]}')::jsonb
FROM unnest($1::uuid[], $2::float8[], $3::int[]) WITH ORDINALITY AS s(id, age, pad, ord)`

// seedEvaluations inserts the evaluations numbered from..to-1, evaluation n
// aged ageDays plus n minutes (a larger n is OLDER while its id is LARGER),
// id archivetest.ID(n), with padBytes of padding, and returns their ids.
func seedEvaluations(t testing.TB, db *kerneltest.DB, from, to, ageDays, padBytes int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	var ages []float64
	var pads []int32
	for n := from; n < to; n++ {
		ids = append(ids, archivetest.ID(n))
		ages = append(ages, float64(ageDays)*86400+float64(n)*60)
		pads = append(pads, int32(padBytes))
	}
	require.Equal(t, int64(len(ids)), db.Exec(t, rulesSeed, ids, ages, pads), "seeded %d evaluations", len(ids))
	return ids
}

// docs returns id → to_jsonb text of the evaluations a WHERE clause (over
// alias t) selects.
func docs(t testing.TB, db *kerneltest.DB, where string, args ...any) map[uuid.UUID]string {
	t.Helper()
	return archivetest.Docs(context.Background(), t, db.Pool, rules.EvaluationsTable, where, args...)
}

const agedWhere = `t.evaluated_at < now() - interval '90 days'`

// readArchive fetches an archive's objects and checks the manifest against
// the data (archivetest.ReadArchive).
func readArchive(ctx context.Context, t testing.TB, st *store.Store, dataKey, manifestKey string) (archive.Manifest, []byte, []archivetest.Line) {
	t.Helper()
	return archivetest.ReadArchive(ctx, t, st, dataKey, manifestKey)
}

// archivedLines reads every archive of a report's table.
func archivedLines(ctx context.Context, t testing.TB, st *store.Store, tr archive.TableReport) []archivetest.Line {
	t.Helper()
	var out []archivetest.Line
	for _, ref := range tr.Archives {
		m, _, lines := readArchive(ctx, t, st, ref.DataKey, ref.ManifestKey)
		require.Equal(t, ref.ArchiveID, m.ArchiveID, fmt.Sprint(ref))
		out = append(out, lines...)
	}
	return out
}

func outboxEvents(t testing.TB, db *kerneltest.DB) []archivetest.Event {
	t.Helper()
	return archivetest.Events(context.Background(), t, db.Pool)
}

// runRules runs one command of the rules binary in-process.
func runRules(ctx context.Context, args []string, env []string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = app.Run(ctx, rules.Spec(), args, &out, &errOut, env)
	return code, out.String(), errOut.String()
}

// The archiver's consent knob and store URL, as environment variables.
const (
	envEnabled  = "CRAIG_RULES__ARCHIVE__ENABLED"
	envStoreURL = "CRAIG_RULES__ARCHIVE__STORE__URL"
)
