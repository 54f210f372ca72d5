package bench_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/craig/retention/bench"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestBenchSmoke runs every scenario of the benchmark at tiny sizes (the
// `bench:smoke` target, and part of `go tool mage test`), so the harness
// cannot rot. It checks what the run did, never how fast: the deletes
// deleted exactly the eligible rows, the archive pass archived every aged
// row, and the results carry every summary key.
func TestBenchSmoke(t *testing.T) {
	// Ten scenarios on a shared 2-core machine beside the other suites.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	kerneltest.NeedsServer(t, "PostgreSQL and the S3 store")
	server := os.Getenv(kerneltest.EnvDatabaseURL)
	if server == "" {
		server = kerneltest.DefaultDatabaseURL
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	conn, err := pgx.Connect(pctx, server)
	pcancel()
	if err != nil {
		kerneltest.Missing(t, "PostgreSQL", "set "+kerneltest.EnvDatabaseURL+" or start a server", err)
	}
	_ = conn.Close(ctx)

	cfg := bench.Smoke()
	cfg.DatabaseURL = server
	cfg.S3URL = kerneltest.S3URL(t) // sets the local store's credentials when none are set
	cfg.RulesBinary = buildService(t, "rules")
	cfg.SecurityBinary = buildService(t, "security")
	cfg.AMQPURL = kerneltest.AMQPURL(t)
	cfg.Log = t.Logf

	res, err := bench.Run(ctx, cfg)
	require.NoError(t, err)
	require.True(t, res.Smoke)

	require.NotNil(t, res.Drain)
	require.Equal(t, int64(cfg.DrainRows*45/100), res.Drain.Eligible, "45% of the drain table is eligible")
	for _, c := range res.Drain.Configs {
		if !c.TimeBoxed {
			require.Equal(t, res.Drain.Eligible, c.Deleted, "%s deletes every eligible row and nothing else", c.Name)
		}
		require.Positive(t, c.RowsPerSec, c.Name)
		require.Positive(t, c.Ratio, c.Name)
	}
	require.Len(t, res.Drain.Runs, cfg.Rounds*len(res.Drain.Configs))

	require.NotNil(t, res.Steady)
	require.Positive(t, res.Steady.HourlyDeleted, "the hourly cycle finds the eligible hour")
	require.Len(t, res.Steady.Runs, cfg.Rounds)

	require.NotNil(t, res.Writer)
	for _, run := range res.Writer.Runs {
		require.Positive(t, run.Samples, "%s round %d", run.Config, run.Round)
		require.True(t, run.Samples >= cfg.WriterMinSamples || run.Windows == bench.MaxWriterWindows, "%s round %d: %d samples in %d windows", run.Config, run.Round, run.Samples, run.Windows)
	}
	require.Len(t, res.Writer.Configs, 4, "without_sweep, with_drain, with_cpu_load, with_hourly_cycle")
	require.Len(t, res.Writer.Curve, 5, "yield batch 10, 50, 250, 1000 and none")
	require.Positive(t, res.Writer.VsFloor, "the drain's p99 against the CPU floor, round by round")
	require.Positive(t, res.Writer.P99Ratio)
	require.LessOrEqual(t, res.Writer.P99RatioCI[0], res.Writer.P99RatioCI[1])

	require.NotNil(t, res.Archive)
	for _, run := range res.Archive.Runs {
		require.Equal(t, int64(cfg.ArchiveRows), run.Rows, "%s round %d moves every aged row", run.Config, run.Round)
	}
	require.Positive(t, res.Archive.PeakRSSMiB, "the child's peak RSS is read")
	require.NotNil(t, res.Archive.BigRows, "the big-row run ran")
	require.Equal(t, cfg.ArchiveBigRows, res.Archive.BigRows.Rows)
	require.Positive(t, res.Archive.BigRows.PeakRSSMiB)

	require.NotNil(t, res.SecurityArchive)
	require.Equal(t, "audit_log", res.SecurityArchive.Table)
	for _, run := range res.SecurityArchive.Runs {
		require.Equal(t, int64(cfg.ArchiveRows), run.Rows, "security %s round %d moves every aged row", run.Config, run.Round)
	}
	require.NotNil(t, res.Fleet)
	require.Len(t, res.Fleet.Runs, 2*cfg.Rounds, "an empty and a booked fleet ledger each round")
	for _, run := range res.Fleet.Runs {
		require.Equal(t, cfg.FleetEvents, run.Events)
		require.Positive(t, run.EventsPerSec)
	}
	require.Equal(t, int64(cfg.ScaleArchives), res.Fleet.BookedRows)
	require.Positive(t, res.Fleet.BookedRatio)
	rep := res.Fleet.Replicas
	require.NotNil(t, rep, "two replicas of each service ran")
	require.Len(t, rep.SecurityBooked, 2)
	require.Equal(t, int64(cfg.FleetEvents), rep.SecurityRows, "every event booked once")
	require.Equal(t, int64(cfg.FleetEvents), rep.InboxRows, "every event applied once")
	require.Equal(t, int64(rep.ArchiveRows), rep.LedgerRows, "every aged row archived once")
	require.Zero(t, rep.AgedLeft)
	require.Equal(t, 2*int(rep.LedgerArchives), rep.DistinctObjects, "no object written twice")

	require.NotNil(t, res.Scale)
	require.Len(t, res.Scale.Steps, 3, "a hundredth, a tenth and all of the scale ledger")
	require.Equal(t, int64(cfg.ScaleArchives), res.Scale.Steps[2].Archives)
	for _, st := range res.Scale.Steps {
		require.Positive(t, st.IndexEntries, "%d archives: the subject index is booked", st.Archives)
		require.Equal(t, int(min(1000, st.Archives)), st.VerifyChecked, "%d archives: the verify checked its limit", st.Archives)
		require.Positive(t, st.LedgerBytesPerArchive)
	}
	require.Positive(t, res.Archive.FloorRatio, "the pass against the same work by hand")
	require.Positive(t, res.SecurityArchive.FloorRatio)
	require.Positive(t, res.SecurityArchive.SpecBatchRowsPS, "security at the specification's batch size")

	require.NotNil(t, res.Purge)
	for _, run := range res.Purge.Runs {
		require.Equal(t, 100, run.Archives, "round %d destroys every due archive", run.Round)
	}

	require.NotNil(t, res.Read)
	require.Equal(t, cfg.ReadArchives, res.Read.VerifyArchives, "every booked archive is verified")
	require.Len(t, res.Read.Runs, cfg.Rounds)
	require.Positive(t, res.Read.FetchP99MS)
	for _, run := range res.Read.Runs {
		require.Positive(t, run.Ratio, "round %d", run.Round)
	}

	require.NotNil(t, res.Outbox)
	require.Len(t, res.Outbox.Runs, 2*cfg.Rounds)
	for _, run := range res.Outbox.Runs {
		require.Equal(t, res.Outbox.Rows, run.Published, "%s: every deliverable event published", run.Config)
		if run.Config == "poison_at_head" {
			require.Positive(t, run.PoisonAttempts, "the poison row was tried")
		}
	}
	require.Positive(t, res.Outbox.Ratio)
	require.NotNil(t, res.Disposition)
	require.Equal(t, cfg.ReadArchives, res.Disposition.Archives)
	require.Positive(t, res.Disposition.DueCases, "the closed cases are listed as due")
	require.Equal(t, int64(cfg.ReadArchives)*1000, res.Disposition.DueRows, "every archived row is of a due case")
	require.Positive(t, res.Disposition.DueListMS)
	require.Len(t, res.Disposition.RoundsMS, cfg.Rounds)

	require.NotNil(t, res.Partition)
	for _, run := range res.Partition.Runs {
		require.Equal(t, run.DeleteRows, run.KernelRows, "round %d: the kernel retires exactly the rows the DELETE deletes", run.Round)
		require.Positive(t, run.Dropped, "round %d: old partitions without pending rows are dropped", run.Round)
		require.Positive(t, run.PartmanRows, "round %d: pg_partman dropped partitions", run.Round)
		if run.Layout == "stuck_one_day_in_8" {
			require.Positive(t, run.Kept, "round %d: the days with pending rows are kept", run.Round)
		} else {
			require.Zero(t, run.Kept, "round %d: no old row is pending: nothing kept", run.Round)
		}
	}
	require.Len(t, res.Partition.Runs, 2*cfg.Rounds)
	require.Positive(t, res.Partition.Writer.SamplesRetiring)
	require.Positive(t, res.Partition.Bloat.PartitionedBytes)
	require.Positive(t, res.Partition.Bloat.RowDeletedBytes)

	require.Len(t, res.Goals, 30)
	require.NotNil(t, res.Archive.HugeRows, "the 20 MiB run ran")
	require.Equal(t, 20<<20, res.Archive.HugeRows.RowBytes)
	require.Positive(t, res.Archive.HugeRows.PeakRSSMiB)
	require.Len(t, res.Partition.Volumes, 2, "two partition sizes")
	for _, v := range res.Partition.Volumes {
		require.Positive(t, v.Ratio, "%d rows a partition", v.RowsPerPartition)
		require.Positive(t, v.PartmanRatio, "%d rows a partition", v.RowsPerPartition)
	}
	require.Positive(t, res.Partition.PartmanRatio)
	require.Positive(t, res.Partition.PartmanPendingLost, "pg_partman drops the stuck days' pending rows the kernel keeps")
	require.Positive(t, res.Partition.Writer.SamplesPartman)
	require.NotNil(t, res.Read.Subject, "the subject fetch ran")
	require.Equal(t, res.Read.Subject.Holding, res.Read.Subject.ArchivesRead, "each fetch read exactly the archives holding the subject")
	require.Positive(t, res.Archive.SubjectIndexCostRatio, "the archive pass ran with and without the subject index")
	for _, g := range res.Goals {
		require.NotNil(t, g.Measured, g.What)
		require.NotNil(t, g.Met, g.What)
	}

	path, err := bench.WriteJSON(res, t.TempDir())
	require.NoError(t, err)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc struct {
		Summary map[string]json.RawMessage `json:"summary"` // numbers, and writer_p99_ratio_ci's [low, high]
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	keys := make([]string, 0, len(doc.Summary))
	for k, v := range doc.Summary {
		keys = append(keys, k)
		require.NotEqual(t, "null", string(v), "summary %s is measured", k)
	}
	slices.Sort(keys)
	require.Equal(t, bench.SummaryKeys(), keys)
	require.Contains(t, bench.Markdown(res), "Backlog drain")
}

// buildService builds a service binary an archive scenario runs.
func buildService(t *testing.T, service string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command (go test puts its own on PATH)")
	out := filepath.Join(t.TempDir(), service)
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/craig/retention/services/"+service+"/cmd/"+service)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "build the %s binary: %s", service, b)
	return out
}
