// Package bench is the retention benchmark: it holds the kernel
// against the physical ceiling and against the ways its peers do the same
// job, on scratch databases of a real PostgreSQL server and against the real
// S3 server, and reports every figure as a ratio measured side by side in
// one run.
//
// Four scenarios, each configuration repeated in Rounds interleaved rounds
// (the order rotates every round) and the median reported:
//
//   - drain: a DrainRows-row event_outbox, 45% eligible, drained by
//     prune.PruneTable with the real outbox policy, by one unbounded DELETE
//     (the ceiling: as the planner plans it and with the index plan forced,
//     the faster of the two in each round), by River-style
//     `id IN (SELECT id … LIMIT n)` batches and by the oldest-first
//     `ORDER BY created_at LIMIT 1000` pattern without an index (time-boxed
//     and extrapolated);
//   - steady: a SteadyRows-row event_outbox spanning the window + 1 h, one
//     hourly sweep cycle and a cycle with nothing eligible;
//   - writer: a writer staging outbox events at WriterRate per second while
//     the kernel drains the backlog, against the same writer with no sweep,
//     beside a CPU-only load and beside one hourly cycle, each with at least
//     WriterMinSamples samples a round; and the drain-rate vs writer-p99
//     curve over the yield batch size;
//   - archive: an archive pass of ArchiveRows aged rule_evaluations (the
//     built `rules archive run` binary as a child process, against the real
//     S3 server) against COPY (SELECT to_jsonb(t) …) TO STDOUT of the same
//     rows, with the child's peak RSS.
//
// Every database is created by the benchmark (craig_bench_<run>_…) from a
// template it seeds once per scenario, and dropped at the end; no other
// database is touched.
package bench

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scenario names, in the order a run measures them.
const (
	ScenarioDrain   = "drain"
	ScenarioSteady  = "steady"
	ScenarioWriter  = "writer"
	ScenarioArchive = "archive"
	// ScenarioSecurityArchive is security's archive pass of audit_log vs COPY.
	ScenarioSecurityArchive = "security_archive"
	// ScenarioFleet is security's inbound path: signed events per second
	// through RabbitMQ into archive_records.
	ScenarioFleet = "fleet"
	// ScenarioPurge is the lifecycle purge of 100 due archives.
	ScenarioPurge = "purge"
	// ScenarioRead is the read side: fetch by id and deep verify through
	// the archive API.
	ScenarioRead = "read"
	// ScenarioPartition is partition retirement on the drain's data in
	// daily partitions (pg_partman).
	ScenarioPartition = "partition"
	// ScenarioDisposition is the due listing of the records schedule over
	// ReadArchives archives (ADR-073).
	ScenarioDisposition = "disposition"
	// ScenarioOutbox is the outbox drain through RabbitMQ: a backlog with
	// one poison row at its head against none (ADR-075).
	ScenarioOutbox = "outbox"
	// ScenarioScale grows a ledger to ScaleArchives archives with their
	// subject index and measures the reads, holds, purge scan and verify
	// against it at three sizes.
	ScenarioScale = "scale"
)

// AllScenarios lists every scenario in run order.
var AllScenarios = []string{ScenarioDrain, ScenarioSteady, ScenarioWriter, ScenarioArchive, ScenarioSecurityArchive, ScenarioFleet, ScenarioPurge, ScenarioRead, ScenarioPartition,
	ScenarioDisposition, ScenarioOutbox, ScenarioScale}

// Environment variables of the benchmark (the cmd's flags override them).
const (
	EnvDatabaseURL = "CRAIG_BENCH_DATABASE_URL" // server; default CRAIG_TEST_DATABASE_URL, then the local one
	EnvS3URL       = "CRAIG_BENCH_S3_URL"       // bucket URL; default CRAIG_TEST_S3_URL, then the local versitygw
	EnvRounds      = "CRAIG_BENCH_ROUNDS"
	EnvDrainRows   = "CRAIG_BENCH_DRAIN_ROWS"
	EnvSteadyRows  = "CRAIG_BENCH_STEADY_ROWS"
	EnvArchiveRows = "CRAIG_BENCH_ARCHIVE_ROWS"
	// EnvArchiveBigRows overrides ArchiveBigRows.
	EnvArchiveBigRows = "CRAIG_BENCH_ARCHIVE_BIG_ROWS"
	EnvWriterRate     = "CRAIG_BENCH_WRITER_RATE"
	EnvWriterSamples  = "CRAIG_BENCH_WRITER_MIN_SAMPLES"
	EnvTimeBox        = "CRAIG_BENCH_TIMEBOX"
	EnvScenarios      = "CRAIG_BENCH_SCENARIOS"
	EnvSmoke          = "CRAIG_BENCH_SMOKE"
	EnvFleetEvents    = "CRAIG_BENCH_FLEET_EVENTS"
	EnvReadArchives   = "CRAIG_BENCH_READ_ARCHIVES"
	// EnvDispositionArchives sizes the disposition batch (archives of
	// 1,000 rows, ten due cases in each).
	EnvDispositionArchives = "CRAIG_BENCH_DISPOSITION_ARCHIVES"
	EnvAMQPURL             = "CRAIG_BENCH_AMQP_URL" // broker; default CRAIG_TEST_AMQP_URL, then the local one
	// EnvScaleArchives and EnvScaleSubjects size the scale scenario.
	EnvScaleArchives = "CRAIG_BENCH_SCALE_ARCHIVES"
	EnvScaleSubjects = "CRAIG_BENCH_SCALE_SUBJECTS"
)

// Default servers: the local PostgreSQL and versitygw of `go tool mage store:up`.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultS3URL       = "s3://craig-archive?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true&disable_https=true"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// Config sizes one run.
type Config struct {
	// DatabaseURL names the PostgreSQL server (any database on it; the
	// benchmark connects to it to create and drop its own databases).
	DatabaseURL string
	// S3URL is the bucket the archive pass writes to.
	S3URL string
	// RulesBinary is the built rules service binary the archive scenario
	// runs as a child process (`rules archive run`).
	RulesBinary string
	// SecurityBinary is the built security binary the security_archive
	// scenario runs (`security archive run`).
	SecurityBinary string
	// AMQPURL is the broker of the fleet scenario.
	AMQPURL string
	// FleetEvents is how many signed archive events one fleet round
	// publishes.
	FleetEvents int
	// ReadArchives is how many archives the read scenario books (ledger
	// rows and objects), each of ReadRowsPerArchive rows; ReadFetches rows
	// are fetched by id.
	ReadArchives       int
	ReadRowsPerArchive int
	ReadFetches        int
	// DispositionArchives is how many archives of DispositionRowsPerArchive
	// rows the disposition batch runs over (ten due cases in each).
	DispositionArchives       int
	DispositionRowsPerArchive int
	// ScaleArchives is how many archives the scale scenario's ledger grows
	// to (measured at a hundredth, a tenth and all of it), each carrying
	// ScaleSubjects subjects; the fleet scenario books as many rows in
	// archive_records for its second configuration.
	ScaleArchives int
	ScaleSubjects int
	// Rounds is how many interleaved rounds every configuration runs (≥ 3).
	Rounds int
	// DrainRows is the event_outbox size of the drain and writer scenarios
	// (45% eligible).
	DrainRows int
	// SteadyRows is the event_outbox size of the steady scenario (spanning
	// the window + 1 h).
	SteadyRows int
	// ArchiveRows is the number of aged rule_evaluations the archive pass
	// archives (plus a tenth as many hot rows it must keep).
	ArchiveRows int
	// ArchiveBigRows is the number of aged 200 KiB rule_evaluations the
	// archive's big-row run archives at batch size 10,000 (its peak RSS
	// shows the byte cap bounds memory).
	ArchiveBigRows int
	// WriterRate is the concurrent writer's rate, in staged events per
	// second (over writerConns connections).
	WriterRate int
	// WriterMinSamples is the fewest writer samples each writer
	// configuration collects per round (windows repeat until then): a p99
	// of a few hundred samples is its second or third slowest commit.
	WriterMinSamples int
	// TimeBox bounds the oldest-first no-index drain of each round; its
	// throughput is extrapolated to the whole backlog.
	TimeBox time.Duration
	// Scenarios to run (AllScenarios when empty).
	Scenarios []string
	// Smoke marks a tiny run (the test suite's); it changes nothing but the
	// label in the results.
	Smoke bool
	// Log receives progress lines (os.Stderr in the cmd); nil discards them.
	Log func(format string, args ...any)
}

// Default returns the full-size configuration, sized to fit a 2-core,
// 24 GiB machine in under 15 minutes (about 8 on an idle one).
func Default() Config {
	return Config{
		DatabaseURL:    DefaultDatabaseURL,
		S3URL:          DefaultS3URL,
		Rounds:         5,
		DrainRows:      2_000_000,
		SteadyRows:     5_000_000,
		ArchiveRows:    200_000,
		ArchiveBigRows: 1_000,
		FleetEvents:    20_000,
		// The read scenario's sizes: 10,000 ledger rows of 1,000 rows, 200 ids.
		ReadArchives: 10_000, ReadRowsPerArchive: 1_000, ReadFetches: 200,
		// The disposition batch's: 10,000 due cases over 1,000 archives of 1,000 rows.
		DispositionArchives: 1_000, DispositionRowsPerArchive: 1_000,
		// The scale scenario's: an agency's ten years of a dozen archived tables.
		ScaleArchives: 1_000_000, ScaleSubjects: scaleSubjectsPerArchive,
		AMQPURL:    DefaultAMQPURL,
		WriterRate: 1000, WriterMinSamples: 5000,
		TimeBox:   15 * time.Second,
		Scenarios: slices.Clone(AllScenarios),
	}
}

// Smoke returns the tiny configuration the test suite runs so the harness
// cannot rot: every scenario and every code path, in seconds.
func Smoke() Config {
	c := Default()
	c.Rounds = 3
	c.DrainRows, c.SteadyRows, c.ArchiveRows, c.ArchiveBigRows, c.FleetEvents = 20_000, 30_000, 2_000, 100, 300
	c.WriterRate, c.WriterMinSamples = 1000, 40 // a window or two per configuration
	c.ReadArchives, c.ReadRowsPerArchive, c.ReadFetches = 30, 50, 20
	c.DispositionArchives, c.DispositionRowsPerArchive = 6, 40
	c.ScaleArchives = 10_000
	c.TimeBox = 300 * time.Millisecond
	c.Smoke = true
	return c
}

// FromEnv returns base with every CRAIG_BENCH_* variable that is set applied
// (CRAIG_BENCH_SMOKE=1 starts from Smoke() instead).
func FromEnv(base Config, getenv func(string) string) (Config, error) {
	c := base
	if v := getenv(EnvSmoke); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvSmoke, v, err)
		}
		if on {
			c = Smoke()
			c.DatabaseURL, c.S3URL, c.RulesBinary, c.SecurityBinary, c.AMQPURL, c.Log = base.DatabaseURL, base.S3URL, base.RulesBinary, base.SecurityBinary, base.AMQPURL, base.Log
		}
	}
	c.DatabaseURL = firstSet(getenv(EnvDatabaseURL), getenv("CRAIG_TEST_DATABASE_URL"), c.DatabaseURL)
	c.S3URL = firstSet(getenv(EnvS3URL), getenv("CRAIG_TEST_S3_URL"), c.S3URL)
	c.AMQPURL = firstSet(getenv(EnvAMQPURL), getenv("CRAIG_TEST_AMQP_URL"), c.AMQPURL)
	var errs []error
	for _, iv := range []struct {
		env string
		dst *int
	}{
		{EnvRounds, &c.Rounds}, {EnvDrainRows, &c.DrainRows}, {EnvSteadyRows, &c.SteadyRows},
		{EnvArchiveRows, &c.ArchiveRows}, {EnvArchiveBigRows, &c.ArchiveBigRows}, {EnvWriterRate, &c.WriterRate}, {EnvWriterSamples, &c.WriterMinSamples},
		{EnvFleetEvents, &c.FleetEvents}, {EnvReadArchives, &c.ReadArchives}, {EnvDispositionArchives, &c.DispositionArchives},
		{EnvScaleArchives, &c.ScaleArchives}, {EnvScaleSubjects, &c.ScaleSubjects},
	} {
		if v := getenv(iv.env); v != "" {
			n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: not an integer", iv.env, v))
				continue
			}
			*iv.dst = n
		}
	}
	if v := getenv(EnvTimeBox); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvTimeBox, v, err))
		} else {
			c.TimeBox = d
		}
	}
	if v := getenv(EnvScenarios); v != "" {
		c.Scenarios = ParseScenarios(v)
	}
	return c, errors.Join(errs...)
}

// ParseScenarios splits a comma-separated scenario list.
func ParseScenarios(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Validate checks the bounds of a configuration.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("no database url"))
	}
	if c.Rounds < 3 {
		errs = append(errs, fmt.Errorf("rounds %d: at least 3 (the median of fewer is not a median)", c.Rounds))
	}
	for _, b := range []struct {
		name string
		v    int
		min  int
	}{{"drain rows", c.DrainRows, 1000}, {"steady rows", c.SteadyRows, 1000}, {"archive rows", c.ArchiveRows, 100}, {"archive big rows", c.ArchiveBigRows, 10}, {"writer rate", c.WriterRate, 2}, {"writer samples", c.WriterMinSamples, 10}, {"fleet events", c.FleetEvents, 10},
		{"read archives", c.ReadArchives, 10}, {"read rows per archive", c.ReadRowsPerArchive, 1}, {"read fetches", c.ReadFetches, 10},
		{"scale archives", c.ScaleArchives, 1000}, {"scale subjects", c.ScaleSubjects, 1}} {
		if b.v < b.min {
			errs = append(errs, fmt.Errorf("%s %d: at least %d", b.name, b.v, b.min))
		}
	}
	if c.TimeBox <= 0 {
		errs = append(errs, fmt.Errorf("time box %s: must be positive", c.TimeBox))
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			errs = append(errs, fmt.Errorf("unknown scenario %q (known: %s)", s, strings.Join(AllScenarios, ", ")))
		}
	}
	if c.runs(ScenarioArchive) || c.runs(ScenarioFleet) {
		if c.RulesBinary == "" {
			errs = append(errs, errors.New("the archive scenario needs the rules binary (build it with `go build -o bin/rules ./services/rules/cmd/rules`)"))
		} else if _, err := os.Stat(c.RulesBinary); err != nil {
			errs = append(errs, fmt.Errorf("rules binary: %w", err))
		}
		if c.S3URL == "" {
			errs = append(errs, errors.New("the archive scenario needs an S3 bucket url"))
		}
	}
	if c.runs(ScenarioSecurityArchive) {
		if c.SecurityBinary == "" {
			errs = append(errs, errors.New("the security_archive scenario needs the security binary (build it with `go tool mage build`)"))
		} else if _, err := os.Stat(c.SecurityBinary); err != nil {
			errs = append(errs, fmt.Errorf("security binary: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (c Config) runs(s string) bool {
	return len(c.Scenarios) == 0 || slices.Contains(c.Scenarios, s)
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		c.Log(format, args...)
	}
}

func firstSet(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
