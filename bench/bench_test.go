package bench

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The summary is read by tools outside this repo: exactly these keys, null
// where not measured.
func TestSummaryKeysAreNullWhenNotMeasured(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Results{})
	require.NoError(t, err)
	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &doc))
	var summary map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(doc["summary"], &summary))
	keys := make([]string, 0, len(summary))
	for k, v := range summary {
		keys = append(keys, k)
		require.Equal(t, "null", string(v), k)
	}
	slices.Sort(keys)
	require.Equal(t, SummaryKeys(), keys)
	require.Equal(t, []string{
		"archive_peak_rss_mib", "archive_vs_copy_ratio", "archive_vs_floor_ratio", "backlog_drain_ratio", "disposition_batch_rows_per_s", "disposition_due_list_ms",
		"disposition_vs_expunge_ratio", "fetch_by_id_p99_ms", "fleet_events_per_s", "fleet_inbound_ratio_1m", "hold_place_ms_1m",
		"ledger_bytes_per_archive_1m", "outbox_drain_rows_per_s", "outbox_poison_drain_ratio",
		"partition_bloat_ratio", "partition_drain_ratio", "partition_drain_ratio_1m", "partition_drain_ratio_200k",
		"partition_drain_vs_partman_ratio_1m", "partition_drain_vs_partman_ratio_200k", "partition_vs_partman_ratio", "partition_wal_bytes_per_row", "partition_writer_p99_ratio",
		"purge_archives_per_s", "purge_scan_ms_1m", "security_archive_vs_copy_ratio", "security_archive_vs_floor_ratio", "steady_idle_cycle_ms",
		"subject_fetch_p99_ms", "subject_fetch_p99_ms_1m", "subject_index_archive_cost_ratio",
		"verify_deep_vs_get_ratio", "verify_peak_rss_mib_1m", "worst_batch_ms", "writer_p99_ratio", "writer_p99_ratio_ci", "writer_p99_vs_floor", "writer_p99_vs_floor_ci",
	}, keys)
}

func TestSummarizeMarksGoals(t *testing.T) {
	t.Parallel()
	res := &Results{
		Drain:  &DrainResult{Configs: []DrainConfig{{Name: cfgKernel, Ratio: 0.93, WorstBatchMS: 30}}},
		Writer: &WriterResult{P99Ratio: 1.4},
		Fleet:  &FleetResult{EventsPerSec: 850},
		Read:   &ReadResult{FetchP99MS: 6.1, VerifyVsGetRatio: 0.69},
		// The due listing over 10,000 archives, just over its goal.
		Disposition: &DispositionResult{DueListMS: 1000.5, Batch: &BatchResult{RowsPerSec: 41000, VsExpungeRatio: 9.5}},
		// A million archives: the hold over its goal, the purge scan within.
		Scale: &ScaleResult{HoldPlaceMS: 1000.5, PurgeScanMS: 12, SubjectFetchP99MS: 80, Steps: []ScaleStep{{Archives: 1_000_000, LedgerBytesPerArchive: 900}}},
	}
	s, goals := summarize(res)
	require.Equal(t, 0.93, *s.BacklogDrainRatio)
	require.Equal(t, 30.0, *s.WorstBatchMS)
	require.Equal(t, 1.4, *s.WriterP99Ratio)
	require.Nil(t, s.SteadyIdleCycleMS)
	require.Nil(t, s.ArchiveVsCopyRatio)
	require.Nil(t, s.ArchivePeakRSSMiB)
	require.Equal(t, 850.0, *s.FleetEventsPerS)
	require.Nil(t, s.SecurityArchiveVsCopyRatio)
	require.Equal(t, 6.1, *s.FetchByIDP99MS)
	require.Equal(t, 0.69, *s.VerifyDeepVsGetRatio)
	require.Equal(t, 41000.0, *s.DispositionBatchRowsPerS)
	require.Len(t, goals, 28)
	met := map[string]*bool{}
	for _, g := range goals {
		met[g.What] = g.Met
	}
	require.True(t, *met["backlog drain (ratio to one unbounded DELETE)"])
	require.True(t, *met["worst batch"])
	require.False(t, *met["writer p99 during a drain (ratio to no sweep)"])
	require.Nil(t, met["archive pass (ratio to COPY)"], "not measured: no verdict")
	require.False(t, *met["inbound signed archive events into archive_records"], "850/s is under the goal")
	require.True(t, *met["fetch an archived row by id through the API (p99)"])
	require.False(t, *met["deep verify (ratio to GET + sha256 of the same objects)"], "0.69 is under 0.7")
	require.Equal(t, 1000.5, *s.DispositionDueListMS)
	require.False(t, *met["list what the records schedule makes due over 10,000 archives"], "1,000.5 ms is over 1,000")
	require.False(t, *met["a disposition batch of 10,000 cases over 1,000 archives (ratio to one court order per case)"], "9.5 is under 10")
	require.False(t, *met["place a subject hold against 1,000,000 archives"], "1,000.5 ms is over 1,000")
	require.True(t, *met["the purge's candidate scan over 1,000,000 archives"])
	require.Equal(t, 900.0, *s.LedgerBytesPerArchive1m)
	require.Nil(t, met["inbound signed events with the fleet ledger full (ratio to empty)"], "not measured: no verdict")
}

func TestMedianAndPercentile(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0.0, median(nil))
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 100.0, percentile(d, 50))
	require.Equal(t, 198.0, percentile(d, 99))
	require.Equal(t, 200.0, percentile(d, 100))
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		EnvDrainRows: "1_000_000", EnvRounds: "5", EnvTimeBox: "2s", EnvScenarios: "drain, archive",
		"CRAIG_TEST_DATABASE_URL": "postgres://x@db/postgres",
	}
	c, err := FromEnv(Default(), func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, 1_000_000, c.DrainRows)
	require.Equal(t, 5, c.Rounds)
	require.Equal(t, 2*time.Second, c.TimeBox)
	require.Equal(t, []string{ScenarioDrain, ScenarioArchive}, c.Scenarios)
	require.Equal(t, "postgres://x@db/postgres", c.DatabaseURL)
	require.Equal(t, Default().SteadyRows, c.SteadyRows)

	env[EnvSmoke] = "1"
	c, err = FromEnv(Default(), func(k string) string { return env[k] })
	require.NoError(t, err)
	require.True(t, c.Smoke)
	require.Equal(t, 1_000_000, c.DrainRows, "an explicit size wins over the smoke sizes")
	require.Equal(t, Smoke().SteadyRows, c.SteadyRows)

	_, err = FromEnv(Default(), func(k string) string { return map[string]string{EnvRounds: "three"}[k] })
	require.ErrorContains(t, err, EnvRounds)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Rounds, c.Scenarios = 2, []string{"drain", "nope"}
	err := c.Validate()
	require.ErrorContains(t, err, "rounds 2: at least 3")
	require.ErrorContains(t, err, `unknown scenario "nope"`)
	require.False(t, strings.Contains(err.Error(), "rules binary"), "the archive scenario is not selected: %v", err)

	c = Default()
	c.Scenarios = []string{ScenarioArchive}
	require.ErrorContains(t, c.Validate(), "rules binary", "the archive scenario needs the rules binary")
}

// The drain seed makes 45% of the table eligible: 46% old, every 46th of
// them pending.
func TestDrainSeedIs45PercentEligible(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1000, 20_000, 2_000_000, 3_000_000} {
		old := drainOldRows(n)
		require.Equal(t, n*45/100, old-old/46, "n=%d", n)
	}
}

func TestWriterBootstrap(t *testing.T) {
	t.Parallel()
	var alone, doubled []time.Duration
	for i := range 5000 {
		alone = append(alone, time.Duration(1+i%1000)*time.Millisecond)
		doubled = append(doubled, time.Duration(2*(1+i%1000))*time.Millisecond)
	}
	ci := ratioCI(doubled, alone)
	require.InDelta(t, 2.0, ci[0], 0.05, "%v", ci)
	require.InDelta(t, 2.0, ci[1], 0.05, "%v", ci)
	require.Equal(t, ci, ratioCI(doubled, alone), "seeded: the same interval every time")
	p := percentileCIs(alone, 50, 99)
	require.LessOrEqual(t, p[0][0], 500.0)
	require.GreaterOrEqual(t, p[0][1], 500.0)
	require.LessOrEqual(t, p[1][0], 990.0)
	require.GreaterOrEqual(t, p[1][1], 990.0)
	require.Less(t, p[1][1]-p[1][0], 20.0, "5,000 samples pin the p99 within a few ms")

	res := &WriterResult{Runs: []WriterRun{{Config: cfgWithDrain, YieldBatch: -1, DrainRowsPerSec: 100}}}
	res.summarize(writerPools{cfgAlone: alone, cfgWithDrain: doubled, curveKey(50): alone, curveKey(0): doubled})
	require.InDelta(t, 2.0, res.P99Ratio, 0.01)
	require.Equal(t, res.Configs[1].P99RatioCI, res.P99RatioCI)
	require.InDelta(t, 100, res.Configs[1].DrainRowsPerSec, 0)
}

func TestWriterKnee(t *testing.T) {
	t.Parallel()
	curve := []WriterCurvePoint{{YieldBatch: 50, DrainRowsPerSec: 100, P99Ratio: 1.05}, {YieldBatch: 250, DrainRowsPerSec: 300, P99Ratio: 1.15},
		{YieldBatch: 1000, DrainRowsPerSec: 500, P99Ratio: 1.6}, {YieldBatch: 0, DrainRowsPerSec: 900, P99Ratio: 2.5}}
	require.Equal(t, 250, knee(curve), "the fastest within 1.2x")
	for i := range curve {
		curve[i].P99Ratio += 1
	}
	require.Equal(t, 250, knee(curve), "none within 1.2x: the fastest within a tenth of the best (2.05 -> 2.255)")
}
