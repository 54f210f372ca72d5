// Package archivetest is the archive engine's conformance suite, in the way
// go-cloud's blob/drivertest is: any archived table (its TableSpec, its
// service's Bookkeeper and one seed statement) runs the engine's properties
// against a real PostgreSQL database and a real S3 store: the round trip
// (objects, verbatim lines, sha256, ledger row, event), no-overwrite,
// batching, byte-cap truncation, quarantine and table isolation,
// crash-resume, atomicity of the bookkeeping, one pass at a time,
// concurrent writers losing nothing, and the ledger's id ranges.
//
// kerneltest.CheckSpec runs it for every archived table a service
// registers; a service's own archive tests keep only what is its own (its
// payload's pinned fields, its columns).
package archivetest

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
)

// Timeout bounds one property's run (its database, store and passes).
const Timeout = 3 * time.Minute

// Harness is one property's world: a fresh scratch database with the
// table's migrations (the archive ledger and event_outbox included) and a
// fresh scratch prefix of the real store.
type Harness struct {
	Pool  *pgxpool.Pool
	Store *store.Store
	// Service is the prefix's service segment (the engine's
	// Config.Service).
	Service string
	// Keys lists the object keys under the prefix, sorted.
	Keys func(t testing.TB) []string
	// Logs receives the engine's log records.
	Logs Logs
}

// Logs is a recording slog handler (kerneltest.LogRecorder).
type Logs interface {
	slog.Handler
	// Entries returns the attributes of the records at level whose
	// message contains msg.
	Entries(level slog.Level, msg string) []map[string]any
}

// HarnessMaker makes a fresh Harness for a test (and cleans it up with it).
type HarnessMaker func(t *testing.T) Harness

// Table is the archived table under test.
type Table struct {
	Spec       archive.TableSpec
	Bookkeeper archive.Bookkeeper
	// Seed inserts one row per element of its three arrays: $1 uuid[] the
	// row's id, $2 float8[] its age in seconds (the age column is
	// now() - make_interval(secs => age)), $3 int[] bytes of padding the
	// row's document must grow by (about; a text or jsonb column of
	// repeat('p', pad)). Every other column is the service's to fill.
	// It must be safe to run concurrently.
	Seed string
}

// property is one of the suite's tests.
type property struct {
	name string
	run  func(t *testing.T, s suite)
}

// properties returns the suite's tests, in the order Run runs them.
func properties() []property {
	return []property{
		{"InsertOnly", testInsertOnly},
		{"RoundTrip", testRoundTrip},
		{"ObjectsCannotBeOverwritten", testNoOverwrite},
		{"Batching", testBatching},
		{"ByteCapTruncates", testByteCap},
		{"QuarantineAndTableIsolation", testQuarantine},
		{"CrashResume", testCrashResume},
		{"AtomicityOutboxGone", testOutboxGone},
		{"OnePassAtATime", testOnePass},
		{"ConcurrentWritersLoseNothing", testConcurrentWriters},
		{"LedgerRangesFindEveryRow", testLedgerRanges},
		{"SubjectsIndexedWithTheArchive", testSubjects},
	}
}

// suite is what every property gets: the table and a way to make its
// world.
type suite struct {
	newHarness HarnessMaker
	table      Table
}

// Run runs every property of the engine over table, each (and each of its
// cases) on a fresh Harness, in parallel.
func Run(t *testing.T, newHarness HarnessMaker, table Table) {
	t.Helper()
	require.NotEmpty(t, table.Spec.Table)
	require.NotEmpty(t, table.Bookkeeper.EventType, "%s: the Bookkeeper's event type", table.Spec.Table)
	require.NotEmpty(t, table.Seed, "%s: a seed", table.Spec.Table)
	s := suite{newHarness: newHarness, table: table}
	for _, p := range properties() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			p.run(t, s)
		})
	}
}

// env is one Harness with the table's helpers.
type env struct {
	ctx   context.Context
	h     Harness
	table Table
	m     *metrics.Archive
	// ident and age are the table's and its age column's quoted names.
	ident, age string
}

func (s suite) env(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	m, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	return &env{
		ctx: ctx, h: s.newHarness(t), table: s.table, m: m,
		ident: pgx.Identifier{s.table.Spec.Table}.Sanitize(),
		age:   "t." + pgx.Identifier{s.table.Spec.AgeColumn}.Sanitize(),
	}
}

// engine builds an engine over specs (nil: the table's) with the
// production defaults (hot window 90 d, batch 1000, 32 MiB) unless mutate
// says otherwise, and the table's bookkeeping unless bk is given.
func (e *env) engine(t testing.TB, specs []archive.TableSpec, bk archive.BookkeepFunc, mutate func(*archive.Config)) *archive.Engine {
	t.Helper()
	if specs == nil {
		specs = []archive.TableSpec{e.table.Spec}
	}
	if bk == nil {
		bk = e.table.Bookkeeper.Bookkeep
	}
	cfg := archive.Config{
		Service: e.h.Service, HotWindowDays: archive.DefaultHotWindowDays,
		BatchSize: archive.DefaultBatchSize, MaxBatchBytes: archive.DefaultMaxBatchBytes,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	eng, err := archive.New(e.h.Pool, e.h.Store, specs, bk, cfg, slog.New(e.h.Logs), e.m)
	require.NoError(t, err)
	return eng
}

// pass runs one pass and requires it to end without error.
func (e *env) pass(t testing.TB, eng *archive.Engine, budget int) archive.PassReport {
	t.Helper()
	rep, err := eng.RunPass(e.ctx, budget)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	return rep
}

// agedWhere selects the rows older than the default hot window.
func (e *env) agedWhere() string {
	return e.age + " < now() - make_interval(days => " + strconv.Itoa(archive.DefaultHotWindowDays) + ")"
}

// count runs a count(*) query.
func (e *env) count(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, e.h.Pool.QueryRow(e.ctx, sql, args...).Scan(&n))
	return n
}

// rows counts the table's rows a WHERE clause (over alias t) selects.
func (e *env) rows(t testing.TB, where string, args ...any) int64 {
	t.Helper()
	return e.count(t, "SELECT count(*) FROM "+e.ident+" AS t WHERE "+where, args...)
}

// exec runs a statement.
func (e *env) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	_, err := e.h.Pool.Exec(e.ctx, sql, args...)
	require.NoError(t, err)
}
