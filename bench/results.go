package bench

import (
	"cmp"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Summary is the top-level object tools outside this repo read: exactly
// these keys, null where the run did not measure them.
type Summary struct {
	// BacklogDrainRatio is kernel rows/s ÷ unbounded DELETE rows/s.
	BacklogDrainRatio *float64 `json:"backlog_drain_ratio"`
	// WorstBatchMS is the kernel's longest single batch (locks held).
	WorstBatchMS *float64 `json:"worst_batch_ms"`
	// SteadyIdleCycleMS is one sweep cycle with nothing eligible.
	SteadyIdleCycleMS *float64 `json:"steady_idle_cycle_ms"`
	// WriterP99Ratio is the writer's pooled p99 during a drain ÷ without a
	// sweep (every round's samples of each together).
	WriterP99Ratio *float64 `json:"writer_p99_ratio"`
	// WriterP99RatioCI is its bootstrap 95% interval.
	WriterP99RatioCI *[2]float64 `json:"writer_p99_ratio_ci"`
	// WriterP99VsFloor is the writer's p99 with the drain ÷ with one
	// CPU-only backend, in the same round (median of the rounds), and
	// WriterP99VsFloorCI its bootstrap 95% interval.
	WriterP99VsFloor   *float64    `json:"writer_p99_vs_floor"`
	WriterP99VsFloorCI *[2]float64 `json:"writer_p99_vs_floor_ci"`
	// ArchiveVsCopyRatio is archive rows/s ÷ COPY rows/s.
	ArchiveVsCopyRatio *float64 `json:"archive_vs_copy_ratio"`
	// ArchivePeakRSSMiB is the archiving process's peak resident set.
	ArchivePeakRSSMiB *float64 `json:"archive_peak_rss_mib"`
	// SecurityArchiveVsCopyRatio is security's audit_log archive rows/s ÷
	// COPY rows/s.
	SecurityArchiveVsCopyRatio *float64 `json:"security_archive_vs_copy_ratio"`
	// FleetEventsPerS is signed archive events per second through
	// RabbitMQ into security's archive_records.
	FleetEventsPerS *float64 `json:"fleet_events_per_s"`
	// PurgeArchivesPerS is archives destroyed per second by one purge call
	// of 100 against the local store.
	PurgeArchivesPerS *float64 `json:"purge_archives_per_s"`
	// FetchByIDP99MS is the p99 of fetching one archived row by id through
	// the archive API (auth included), with 10,000 ledger rows of 1,000
	// rows.
	FetchByIDP99MS *float64 `json:"fetch_by_id_p99_ms"`
	// VerifyDeepVsGetRatio is a deep verify's archives/s ÷ a plain GET +
	// sha256 of the same objects.
	VerifyDeepVsGetRatio *float64 `json:"verify_deep_vs_get_ratio"`
	// PartitionDrainRatio is the kernel's rows/s on the drain's data in
	// daily partitions ÷ one unbounded DELETE on the unpartitioned copy.
	PartitionDrainRatio *float64 `json:"partition_drain_ratio"`
	// PartitionWALBytesPerRow is the kernel's WAL per retired row there.
	PartitionWALBytesPerRow *float64 `json:"partition_wal_bytes_per_row"`
	// PartitionWriterP99Ratio is a writer's pooled p99 beside the
	// retirement ÷ the same writer alone.
	PartitionWriterP99Ratio *float64 `json:"partition_writer_p99_ratio"`
	// PartitionVsPartmanRatio is the kernel's retirement time ÷ pg_partman's
	// own retention on the same layout (clean layout, median of rounds).
	PartitionVsPartmanRatio *float64 `json:"partition_vs_partman_ratio"`
	// PartitionDrainRatio200k and 1m: partition_drain_ratio at 200,000 and
	// 1,000,000 rows a partition.
	PartitionDrainRatio200k *float64 `json:"partition_drain_ratio_200k"`
	PartitionDrainRatio1m   *float64 `json:"partition_drain_ratio_1m"`
	// PartitionDrainVsPartmanRatio200k and 1m: the kernel's drain ratio ÷
	// pg_partman's on the same partitions in the same rounds (pg_partman's
	// time ÷ the kernel's): the goal stated against a drop's own floor.
	PartitionDrainVsPartmanRatio200k *float64 `json:"partition_drain_vs_partman_ratio_200k"`
	PartitionDrainVsPartmanRatio1m   *float64 `json:"partition_drain_vs_partman_ratio_1m"`
	// PartitionBloatRatio is the row-deleted outbox's size ÷ the
	// partitioned one's after 30 simulated days of daily sweeps.
	PartitionBloatRatio *float64 `json:"partition_bloat_ratio"`
	// SubjectFetchP99MS is the p99 of fetching every row of a subject
	// present in 5 archives among 10,000 of 1,000 rows, through the API
	// (JWT included).
	SubjectFetchP99MS *float64 `json:"subject_fetch_p99_ms"`
	// DispositionDueListMS is the median time of listing what the records
	// schedule makes due over ReadArchives indexed archives (ADR-073).
	DispositionDueListMS *float64 `json:"disposition_due_list_ms"`
	// DispositionBatchRowsPerS is one disposition batch's rows destroyed
	// per second (DispositionArchives archives, ten due cases in each).
	DispositionBatchRowsPerS *float64 `json:"disposition_batch_rows_per_s"`
	// DispositionVsExpungeRatio is expunging the batch's cases one court
	// order at a time ÷ the batch (time).
	DispositionVsExpungeRatio *float64 `json:"disposition_vs_expunge_ratio"`
	// OutboxDrainRowsPerS is the outbox drain's events per second through
	// RabbitMQ (confirms, mandatory) over a clean backlog.
	OutboxDrainRowsPerS *float64 `json:"outbox_drain_rows_per_s"`
	// OutboxPoisonDrainRatio is the same drain with one poison row at the
	// backlog's head ÷ without (median of the rounds, side by side).
	OutboxPoisonDrainRatio *float64 `json:"outbox_poison_drain_ratio"`
	// SubjectIndexArchiveCostRatio is rules' archive pass with the subject
	// index (rows/s) ÷ without it, in the same round.
	SubjectIndexArchiveCostRatio *float64 `json:"subject_index_archive_cost_ratio"`
	// SubjectFetchP99MS1m is subject_fetch_p99_ms against the scale
	// scenario's ledger (1,000,000 archives at full size), and the hold
	// placement, the purge's candidate scan and a deep verify's peak
	// memory against it.
	SubjectFetchP99MS1m *float64 `json:"subject_fetch_p99_ms_1m"`
	HoldPlaceMS1m       *float64 `json:"hold_place_ms_1m"`
	PurgeScanMS1m       *float64 `json:"purge_scan_ms_1m"`
	VerifyPeakRSSMiB1m  *float64 `json:"verify_peak_rss_mib_1m"`
	// LedgerBytesPerArchive1m is the ledger, subject index and case rows
	// on disk per archive at that size.
	LedgerBytesPerArchive1m *float64 `json:"ledger_bytes_per_archive_1m"`
	// ArchiveVsFloorRatio is rules' archive pass ÷ the same work done by
	// hand (COPY out, PUT, DELETE by id, ledger INSERT per batch, one
	// connection), per round; SecurityArchiveVsFloorRatio security's.
	ArchiveVsFloorRatio         *float64 `json:"archive_vs_floor_ratio"`
	SecurityArchiveVsFloorRatio *float64 `json:"security_archive_vs_floor_ratio"`
	// FleetInboundRatio1m is the fleet ledger's inbound rate with
	// ScaleArchives rows already booked ÷ with none (same rounds).
	FleetInboundRatio1m *float64 `json:"fleet_inbound_ratio_1m"`
}

// SummaryKeys returns the summary's JSON keys, sorted.
func SummaryKeys() []string {
	t := reflect.TypeFor[Summary]()
	keys := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	slices.Sort(keys)
	return keys
}

// Results is everything one run measured; it is written to
// bench/results/<date>.json.
type Results struct {
	Summary   Summary        `json:"summary"`
	Goals     []Goal         `json:"goals"`
	Date      string         `json:"date"`
	StartedAt time.Time      `json:"started_at"`
	Seconds   float64        `json:"seconds"`
	Smoke     bool           `json:"smoke"`
	Config    ConfigReport   `json:"config"`
	Machine   Machine        `json:"machine"`
	Drain     *DrainResult   `json:"drain"`
	Steady    *SteadyResult  `json:"steady"`
	Writer    *WriterResult  `json:"writer"`
	Archive   *ArchiveResult `json:"archive"`
	// SecurityArchive is the security_archive scenario (audit_log).
	SecurityArchive *ArchiveResult   `json:"security_archive"`
	Fleet           *FleetResult     `json:"fleet"`
	Purge           *PurgeResult     `json:"purge"`
	Read            *ReadResult      `json:"read"`
	Partition       *PartitionResult `json:"partition"`
	// Disposition is the due listing of the records schedule.
	Disposition *DispositionResult `json:"disposition"`
	// Outbox is the outbox drain with and without a poison row.
	Outbox *OutboxResult `json:"outbox"`
	// Scale is the ledger grown to ScaleArchives archives.
	Scale *ScaleResult `json:"scale"`
	Notes []string     `json:"notes"`
}

// DispositionResult is the disposition scenario: the due listing over
// Archives archives of CasesPerArchive cases each.
type DispositionResult struct {
	Archives        int       `json:"archives"`
	CasesPerArchive int       `json:"cases_per_archive"`
	SeedSeconds     float64   `json:"seed_s"`
	DueCases        int       `json:"due_cases"`
	DueRows         int64     `json:"due_rows"`
	RoundsMS        []float64 `json:"rounds_ms"`
	DueListMS       float64   `json:"disposition_due_list_ms"`
	// Batch is one disposition batch's execution.
	Batch *BatchResult `json:"batch"`
}

// BatchResult is a disposition batch's execution against expunging its
// cases one court order at a time.
type BatchResult struct {
	Archives              int     `json:"archives"`
	RowsPerArchive        int     `json:"rows_per_archive"`
	DueCases              int     `json:"due_cases"`
	SeedSeconds           float64 `json:"seed_s"`
	ExpungeSample         int     `json:"expunge_sample_orders"`
	ExpungeSecondsPerCase float64 `json:"expunge_s_per_case"`
	BatchCases            int     `json:"batch_cases"`
	RowsDestroyed         int64   `json:"rows_destroyed"`
	ArchivesRewritten     int     `json:"archives_rewritten"`
	ArchivesPurged        int     `json:"archives_purged"`
	BatchSeconds          float64 `json:"batch_s"`
	RowsPerSec            float64 `json:"disposition_batch_rows_per_s"`
	VsExpungeRatio        float64 `json:"disposition_vs_expunge_ratio"`
}

// ConfigReport is the configuration a run used.
type ConfigReport struct {
	Rounds         int      `json:"rounds"`
	DrainRows      int      `json:"drain_rows"`
	SteadyRows     int      `json:"steady_rows"`
	ArchiveRows    int      `json:"archive_rows"`
	WriterRate     int      `json:"writer_rate_per_s"`
	TimeBoxSeconds float64  `json:"oldest_first_time_box_s"`
	Scenarios      []string `json:"scenarios"`
	BatchSize      int      `json:"kernel_batch_size"`
	WindowDays     int      `json:"outbox_window_days"`
	ArchiveBatch   int      `json:"archive_batch_size"`
	MaxBatchBytes  int64    `json:"archive_max_batch_bytes"`
}

// Machine describes where the run took place and how busy it looked.
type Machine struct {
	CPUs     int    `json:"cpus"`
	MemGiB   int    `json:"mem_gib"`
	Postgres string `json:"postgres"`
	Go       string `json:"go"`
	// LoadBefore is the 1-minute load average before the run started.
	LoadBefore float64 `json:"load_before"`
	// LoadMean and LoadMax are sampled every second during the run (the
	// run's own work included).
	LoadMean float64 `json:"load_mean"`
	LoadMax  float64 `json:"load_max"`
	// OtherBackendsMean and OtherBackendsMax count active sessions in
	// databases that are not this run's, sampled every second.
	OtherBackendsMean float64 `json:"other_active_backends_mean"`
	OtherBackendsMax  int     `json:"other_active_backends_max"`
	// Busy is true when other work shared the machine: the timings are
	// noisier than on an idle machine (the side-by-side ratios less so).
	Busy bool `json:"busy"`
}

// Goal is one line of the goal table (bench/README.md).
type Goal struct {
	What     string   `json:"what"`
	Goal     string   `json:"goal"`
	Measured *float64 `json:"measured"`
	Unit     string   `json:"unit"`
	Met      *bool    `json:"met"`
}

// DrainResult is the backlog-drain scenario.
type DrainResult struct {
	Rows     int             `json:"rows"`
	Eligible int64           `json:"eligible"`
	Configs  []DrainConfig   `json:"configs"`
	Runs     []DrainRun      `json:"runs"`
	Kernel   KernelDrainNote `json:"kernel"`
}

// KernelDrainNote describes the kernel configuration that ran.
type KernelDrainNote struct {
	BatchSize          int     `json:"batch_size"`
	CycleCap           int64   `json:"cycle_cap"`
	StatementTimeoutMS int64   `json:"statement_timeout_ms"`
	LockTimeoutMS      int64   `json:"lock_timeout_ms"`
	WorstBatchMaxMS    float64 `json:"worst_batch_max_ms"`
	// YieldedMax is the most batches one kernel drain ran at the reduced
	// size because other sessions of the server were writing: 0 on a quiet
	// server (the drain is measured at the full batch size).
	YieldedMax int `json:"yielded_batches_max"`
}

// DrainConfig is one way of draining, medians over the rounds.
type DrainConfig struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	// RowsPerSec is the median throughput; for a time-boxed configuration
	// it is the throughput within the time box.
	RowsPerSec float64 `json:"rows_per_s"`
	// Ratio is the median over the rounds of this configuration's rows/s ÷
	// the unbounded DELETE's rows/s in the same round.
	Ratio        float64 `json:"ratio_to_unbounded_delete"`
	WorstBatchMS float64 `json:"worst_batch_ms"`
	WALPerRow    float64 `json:"wal_bytes_per_row"`
	Batches      int     `json:"batches"`
	Deleted      int64   `json:"deleted"`
	// TimeBoxed marks a configuration stopped by the time box; its
	// ExtrapolatedSeconds is the time the whole backlog would take at the
	// measured rate.
	TimeBoxed           bool    `json:"time_boxed"`
	ExtrapolatedSeconds float64 `json:"extrapolated_s,omitempty"`
}

// DrainRun is one configuration in one round.
type DrainRun struct {
	Config       string  `json:"config"`
	Round        int     `json:"round"`
	Order        int     `json:"order"`
	Deleted      int64   `json:"deleted"`
	Batches      int     `json:"batches"`
	Seconds      float64 `json:"seconds"`
	RowsPerSec   float64 `json:"rows_per_s"`
	WorstBatchMS float64 `json:"worst_batch_ms"`
	WALBytes     int64   `json:"wal_bytes"`
	TimeBoxed    bool    `json:"time_boxed"`
	// Yielded counts the kernel's batches run at the reduced size because
	// other sessions of the server were writing (0 on a quiet server).
	Yielded int `json:"yielded_batches,omitempty"`
}

// SteadyResult is the steady-state scenario.
type SteadyResult struct {
	Rows int `json:"rows"`
	// HourlyCycleMS is one sweep cycle (transport group, lease included)
	// with about an hour of rows eligible.
	HourlyCycleMS float64 `json:"hourly_cycle_ms"`
	HourlyDeleted int64   `json:"hourly_deleted"`
	// IdleCycleMS is a cycle with nothing eligible right after the hourly
	// one (its dead tuples not yet vacuumed).
	IdleCycleMS float64 `json:"idle_cycle_ms"`
	// IdleVacuumedCycleMS is the same after VACUUM.
	IdleVacuumedCycleMS float64 `json:"idle_vacuumed_cycle_ms"`
	// IdleColdCycleMS is a cycle with nothing eligible that first opens a
	// connection (no idle one in the pool, as in `sweep --once`).
	IdleColdCycleMS float64     `json:"idle_new_connection_cycle_ms"`
	Runs            []SteadyRun `json:"runs"`
}

// SteadyRun is one round of the steady scenario.
type SteadyRun struct {
	Round               int     `json:"round"`
	HourlyCycleMS       float64 `json:"hourly_cycle_ms"`
	HourlyDeleted       int64   `json:"hourly_deleted"`
	IdleCycleMS         float64 `json:"idle_cycle_ms"`
	IdleVacuumedCycleMS float64 `json:"idle_vacuumed_cycle_ms"`
	IdleColdCycleMS     float64 `json:"idle_new_connection_cycle_ms"`
}

// WriterResult is the writer scenario: every configuration's samples of all
// rounds pooled (at least MinSamples a round each), percentiles with
// bootstrap 95% confidence intervals, and the drain's curve.
type WriterResult struct {
	RatePerSec  int `json:"rate_per_s"`
	Connections int `json:"connections"`
	MinSamples  int `json:"min_samples_per_config_round"`
	// P99Ratio is the with_drain pool's p99 ÷ the without_sweep pool's,
	// P99RatioCI its bootstrap 95% interval.
	P99Ratio   float64    `json:"p99_ratio"`
	P99RatioCI [2]float64 `json:"p99_ratio_ci95"`
	// VsFloor is with_drain's p99 ÷ with_cpu_load's in the same round
	// (median of the rounds), VsFloorCI its bootstrap 95% interval.
	VsFloor   float64            `json:"p99_vs_floor"`
	VsFloorCI [2]float64         `json:"p99_vs_floor_ci95"`
	Configs   []WriterConfig     `json:"configs"`
	Curve     []WriterCurvePoint `json:"curve"`
	// KneeYieldBatch is the curve's knee: the fastest drain whose writer
	// p99 ratio is within 1.2x, or within a tenth of the best ratio when no
	// point is (0: no yield).
	KneeYieldBatch int         `json:"knee_yield_batch_size"`
	Runs           []WriterRun `json:"runs"`
}

// WriterConfig is one configuration's pooled figures.
type WriterConfig struct {
	Name            string     `json:"config"`
	Samples         int        `json:"samples"`
	P50MS           float64    `json:"p50_ms"`
	P50CI           [2]float64 `json:"p50_ci95_ms"`
	P99MS           float64    `json:"p99_ms"`
	P99CI           [2]float64 `json:"p99_ci95_ms"`
	P999MS          float64    `json:"p99_9_ms"`
	P999CI          [2]float64 `json:"p99_9_ci95_ms"`
	P99Ratio        float64    `json:"p99_ratio"`
	P99RatioCI      [2]float64 `json:"p99_ratio_ci95"`
	DrainRowsPerSec float64    `json:"drain_rows_per_s,omitempty"`
}

// WriterCurvePoint is one yield batch size of the curve (0: no yield).
type WriterCurvePoint struct {
	YieldBatch      int        `json:"yield_batch_size"`
	DrainRowsPerSec float64    `json:"drain_rows_per_s"`
	Samples         int        `json:"samples"`
	P99MS           float64    `json:"p99_ms"`
	P99Ratio        float64    `json:"p99_ratio"`
	P99RatioCI      [2]float64 `json:"p99_ratio_ci95"`
}

// WriterRun is one configuration in one round (one or more windows).
type WriterRun struct {
	Config     string  `json:"config"`
	YieldBatch int     `json:"yield_batch_size"`
	Round      int     `json:"round"`
	Order      int     `json:"order"`
	Windows    int     `json:"windows"`
	Samples    int     `json:"samples"`
	P50MS      float64 `json:"p50_ms"`
	P99MS      float64 `json:"p99_ms"`
	MaxMS      float64 `json:"max_ms"`
	WindowS    float64 `json:"window_s"`
	Deleted    int64   `json:"drain_deleted,omitempty"`
	// Batches and Yielded are the drain's batches, and those of them run at
	// the yield batch size because the writer was seen.
	Batches         int     `json:"drain_batches,omitempty"`
	Yielded         int     `json:"drain_yielded_batches,omitempty"`
	DrainRowsPerSec float64 `json:"drain_rows_per_s,omitempty"`
}

// ArchiveResult is the archive scenario.
type ArchiveResult struct {
	Table         string  `json:"table"`
	Rows          int     `json:"rows"`
	HotRows       int     `json:"hot_rows"`
	BatchSize     int     `json:"batch_size"`
	MaxBatchBytes int64   `json:"max_batch_bytes"`
	ArchiveRowsPS float64 `json:"archive_rows_per_s"`
	CopyRowsPS    float64 `json:"copy_rows_per_s"`
	Ratio         float64 `json:"ratio_to_copy"`
	PeakRSSMiB    float64 `json:"peak_rss_mib"`
	PeakRSSMaxMiB float64 `json:"peak_rss_max_mib"`
	// RSSGoalMiB is 64 MiB + max_batch_bytes.
	RSSGoalMiB float64 `json:"rss_goal_mib"`
	// FetchLookup is not measured: there is no `archive fetch` yet.
	FetchLookupMS *float64     `json:"fetch_lookup_ms"`
	Runs          []ArchiveRun `json:"runs"`
	// BigRows is the big-row run: 200 KiB rows at batch size 10,000.
	BigRows *ArchiveBigRows `json:"big_rows,omitempty"`
	// HugeRows is the 20 MiB run: rows of more than half max_batch_bytes.
	HugeRows *ArchiveBigRows `json:"huge_rows,omitempty"`
	// SubjectIndexRowsPS is the median rows/s of the pass with the
	// subject index (rules: archive.subject_key_file set), and
	// SubjectIndexCostRatio its per-round ratio to the pass without.
	SubjectIndexRowsPS    float64 `json:"subject_index_rows_per_s,omitempty"`
	SubjectIndexCostRatio float64 `json:"subject_index_cost_ratio,omitempty"`
	// FloorRowsPS is the median rows/s of the same work done by hand
	// (floor_by_hand), and FloorRatio the pass's per-round ratio to it.
	FloorRowsPS float64 `json:"floor_rows_per_s,omitempty"`
	FloorRatio  float64 `json:"ratio_to_floor,omitempty"`
	// SpecBatchRowsPS and SpecBatchPeakRSSMiB are the pass at the
	// specification's batch size (1,000) when the service's default
	// differs (security: 10,000).
	SpecBatchRowsPS     float64 `json:"spec_batch_rows_per_s,omitempty"`
	SpecBatchPeakRSSMiB float64 `json:"spec_batch_peak_rss_mib,omitempty"`
}

// ArchiveBigRows is one archive pass of large rows at the largest batch
// size: the selection must stop at max_batch_bytes, so the peak RSS stays
// within 64 MiB + 2 × max_batch_bytes (two batches in flight) whatever the
// row size times the batch size (here 2 GB).
type ArchiveBigRows struct {
	Rows          int     `json:"rows"`
	RowBytes      int     `json:"row_bytes"`
	BatchSize     int     `json:"batch_size"`
	MaxBatchBytes int64   `json:"max_batch_bytes"`
	Archives      int     `json:"archives"`
	Seconds       float64 `json:"seconds"`
	PeakRSSMiB    float64 `json:"peak_rss_mib"`
	// RSSGoalMiB is 64 MiB + 2 × max_batch_bytes.
	RSSGoalMiB float64 `json:"rss_goal_mib"`
}

// ArchiveRun is one configuration in one round.
type ArchiveRun struct {
	Config     string  `json:"config"`
	Round      int     `json:"round"`
	Order      int     `json:"order"`
	Rows       int64   `json:"rows"`
	Bytes      int64   `json:"bytes,omitempty"`
	Seconds    float64 `json:"seconds"`
	RowsPerSec float64 `json:"rows_per_s"`
	PeakRSSMiB float64 `json:"peak_rss_mib,omitempty"`
	Archives   int     `json:"archives,omitempty"`
}

// median of the values (0 for none); the mean of the middle two for an even
// count.
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile by nearest rank (p in (0, 100]) of durations, in ms.
func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.SortFunc(s, cmp.Compare)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return ms(s[rank-1])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func maxDuration(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// round3 keeps three significant decimals for the report.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// FleetResult is the fleet scenario: security's inbound path.
type FleetResult struct {
	Events       int     `json:"events"`
	Signed       bool    `json:"signed"`
	EventsPerSec float64 `json:"events_per_s"`
	// BookedRows is how many rows archive_records held before the
	// booked_ledger configuration's rounds; BookedEventsPerSec its median
	// rate and BookedRatio the median of the rounds' booked ÷ empty.
	BookedRows         int64      `json:"booked_rows"`
	BookedEventsPerSec float64    `json:"booked_events_per_s"`
	BookedRatio        float64    `json:"booked_ratio"`
	Runs               []FleetRun `json:"runs"`
	// Replicas is the run of two replicas of each service side by side.
	Replicas *FleetReplicas `json:"replicas,omitempty"`
}

// FleetReplicas is two replicas of security (consuming one queue) and two
// of rules (passes under one archive lease) against one database each and
// one store: what each did, and the totals that show nothing was done
// twice.
type FleetReplicas struct {
	Replicas int `json:"replicas"`
	// Events were published once; SecurityBooked is each replica's
	// archive_records_booked_total, SecurityRows the archive_records and
	// InboxRows the event_inbox rows after (each = Events when nothing was
	// booked twice).
	Events          int     `json:"events"`
	SecurityBooked  []int64 `json:"security_booked_per_replica"`
	SecurityRows    int64   `json:"security_archive_records"`
	InboxRows       int64   `json:"security_inbox_records"`
	SecuritySeconds float64 `json:"security_seconds"`
	// ArchiveRows aged rows were archived by passes of both replicas:
	// RulesPasses and RulesArchived per replica, RulesLeaseBusy the passes
	// that found the other holding the lease; LedgerArchives and
	// LedgerRows what the ledger booked, DistinctObjects the objects the
	// reports named (twice the archives when none was written twice),
	// AgedLeft the aged rows not archived (0).
	ArchiveRows     int     `json:"archive_rows"`
	RulesPasses     []int   `json:"rules_passes_per_replica"`
	RulesArchived   []int64 `json:"rules_rows_per_replica"`
	RulesLeaseBusy  []int   `json:"rules_lease_busy_per_replica"`
	LedgerArchives  int64   `json:"ledger_archives"`
	LedgerRows      int64   `json:"ledger_rows"`
	DistinctObjects int     `json:"distinct_objects"`
	AgedLeft        int64   `json:"aged_rows_left"`
}

// FleetRun is one fleet round.
type FleetRun struct {
	Round        int     `json:"round"`
	Config       string  `json:"config"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_s"`
}

// PurgeResult is the purge scenario.
type PurgeResult struct {
	Archives       int        `json:"archives"`
	ArchivesPerSec float64    `json:"archives_per_s"`
	Runs           []PurgeRun `json:"runs"`
}

// PurgeRun is one purge round.
type PurgeRun struct {
	Round          int     `json:"round"`
	Archives       int     `json:"archives"`
	Seconds        float64 `json:"seconds"`
	ArchivesPerSec float64 `json:"archives_per_s"`
}

// ReadResult is the read scenario.
type ReadResult struct {
	Archives       int     `json:"archives"`
	RowsPerArchive int     `json:"rows_per_archive"`
	SeedSeconds    float64 `json:"seed_s"`
	Fetches        int     `json:"fetches"`
	FetchP50MS     float64 `json:"fetch_p50_ms"`
	FetchP99MS     float64 `json:"fetch_p99_ms"`
	// VerifyArchives is how many archives each verify round checks.
	VerifyArchives   int       `json:"verify_archives"`
	VerifyVsGetRatio float64   `json:"verify_deep_vs_get_ratio"`
	Runs             []ReadRun `json:"runs"`
	// Subject is the subject read over the same archives.
	Subject *SubjectReadResult `json:"subject,omitempty"`
}

// SubjectReadResult is the subject read: one subject in Holding of the
// archives (every other archive indexed by SubjectsPerArchive others),
// fetched Fetches times through the API.
type SubjectReadResult struct {
	Holding            int     `json:"archives_holding"`
	SubjectsPerArchive int     `json:"subjects_per_archive"`
	IndexRows          int     `json:"index_rows"`
	Fetches            int     `json:"fetches"`
	Rows               int     `json:"rows_per_fetch"`
	ArchivesRead       int     `json:"archives_read_per_fetch"`
	FetchP50MS         float64 `json:"fetch_p50_ms"`
	FetchP99MS         float64 `json:"fetch_p99_ms"`
}

// ReadRun is one verify round.
type ReadRun struct {
	Round                int     `json:"round"`
	VerifySeconds        float64 `json:"verify_s"`
	GetSeconds           float64 `json:"get_sha256_s"`
	VerifyArchivesPerSec float64 `json:"verify_archives_per_s"`
	GetArchivesPerSec    float64 `json:"get_sha256_archives_per_s"`
	Ratio                float64 `json:"ratio"`
}

// PartitionResult is the partition scenario. Ratio and WALBytesPerRow are
// the clean layout's (no old row pending); the Stuck figures are the layout
// with one old day in eight holding undelivered events.
type PartitionResult struct {
	Rows                  int     `json:"rows"`
	Ratio                 float64 `json:"partition_drain_ratio"`
	WALBytesPerRow        float64 `json:"wal_bytes_per_retired_row"`
	StuckRatio            float64 `json:"stuck_partition_drain_ratio"`
	StuckWALBytesPerRow   float64 `json:"stuck_wal_bytes_per_retired_row"`
	MSPerDroppedPartition float64 `json:"ms_per_dropped_partition"`
	// PartmanRatio is the kernel's time ÷ pg_partman's own retention
	// (run_maintenance with retention set) on the same layout, median of
	// the clean layout's rounds; PartmanMSPerPartition pg_partman's time per
	// partition it dropped.
	PartmanRatio          float64 `json:"partition_vs_partman_ratio"`
	PartmanMSPerPartition float64 `json:"partman_ms_per_dropped_partition"`
	// PartmanPendingLost is what pg_partman's blind drop removed of the rows
	// the kernel keeps (undelivered events) in the stuck layout, per round.
	PartmanPendingLost int64 `json:"partman_pending_rows_dropped"`
	// Volumes are the partition scenario at larger partitions (200,000 and
	// 1,000,000 rows each).
	Volumes []PartitionVolume `json:"volumes"`
	Writer  PartitionWriter   `json:"writer"`
	Bloat   PartitionBloat    `json:"bloat"`
	Runs    []PartitionRun    `json:"runs"`
}

// PartitionWriter is a writer beside the retirement, pooled over rounds.
type PartitionWriter struct {
	RatePerSec      int     `json:"rate_per_s"`
	SamplesRetiring int     `json:"samples_retiring"`
	SamplesAlone    int     `json:"samples_alone"`
	RetiringP50MS   float64 `json:"retiring_p50_ms"`
	RetiringP99MS   float64 `json:"retiring_p99_ms"`
	AloneP50MS      float64 `json:"alone_p50_ms"`
	AloneP99MS      float64 `json:"alone_p99_ms"`
	P99Ratio        float64 `json:"p99_ratio"`
	// PartmanP50MS, PartmanP99MS: the same writer beside pg_partman's own
	// retention of the same layout; PartmanP99Ratio its p99 ÷ alone.
	SamplesPartman  int     `json:"samples_partman"`
	PartmanP50MS    float64 `json:"partman_p50_ms"`
	PartmanP99MS    float64 `json:"partman_p99_ms"`
	PartmanP99Ratio float64 `json:"partman_p99_ratio"`
}

// PartitionVolume is the clean layout at one partition size: Partitions
// old daily partitions of RowsPerPartition rows, retired by the kernel and
// by pg_partman, and deleted by one unbounded DELETE on the unpartitioned
// copy; medians over the rounds.
type PartitionVolume struct {
	RowsPerPartition int     `json:"rows_per_partition"`
	Partitions       int     `json:"partitions"`
	KernelSeconds    float64 `json:"kernel_s"`
	PartmanSeconds   float64 `json:"partman_s"`
	DeleteSeconds    float64 `json:"delete_s"`
	// Ratio is the kernel's rows/s ÷ the unbounded DELETE's (the same rows).
	Ratio        float64 `json:"partition_drain_ratio"`
	PartmanRatio float64 `json:"partition_vs_partman_ratio"`
	// MSPerPartition is the kernel's time per partition of rows.
	MSPerPartition float64 `json:"ms_per_partition"`
	Rounds         int     `json:"rounds"`
}

// PartitionBloat is the table's size after the simulated steady days.
type PartitionBloat struct {
	RowsPerDay          int     `json:"rows_per_day"`
	WindowDays          int     `json:"window_days"`
	SteadyDays          int     `json:"steady_days"`
	PartitionedBytes    int64   `json:"partitioned_bytes"`
	PartitionedLiveRows int64   `json:"partitioned_live_rows"`
	RowDeletedBytes     int64   `json:"row_deleted_bytes"`
	RowDeletedLiveRows  int64   `json:"row_deleted_live_rows"`
	SizeRatio           float64 `json:"row_deleted_vs_partitioned_size_ratio"`
}

// PartitionRun is one partition round.
type PartitionRun struct {
	Layout          string  `json:"layout"`
	Round           int     `json:"round"`
	KernelRows      int64   `json:"kernel_rows"`
	KernelSeconds   float64 `json:"kernel_s"`
	KernelWAL       int64   `json:"kernel_wal_bytes"`
	KernelWALPerRow float64 `json:"kernel_wal_bytes_per_row"`
	Dropped         int     `json:"partitions_dropped"`
	Kept            int     `json:"partitions_kept"`
	DeleteRows      int64   `json:"delete_rows"`
	DeleteSeconds   float64 `json:"delete_s"`
	DeleteWAL       int64   `json:"delete_wal_bytes"`
	DeleteWALPerRow float64 `json:"delete_wal_bytes_per_row"`
	PartmanRows     int64   `json:"partman_rows"`
	PartmanSeconds  float64 `json:"partman_s"`
	PartmanDropped  int     `json:"partman_partitions_dropped"`
	// PartmanPendingLost: rows the kernel keeps that pg_partman dropped.
	PartmanPendingLost int64   `json:"partman_pending_rows_dropped"`
	Ratio              float64 `json:"ratio"`
}

// ScaleResult is the scale scenario: a ledger grown to Archives archives
// in three steps, each measured.
type ScaleResult struct {
	Archives           int `json:"archives"`
	SubjectsPerArchive int `json:"subjects_per_archive"`
	RowsPerArchive     int `json:"rows_per_archive"`
	// VerifyLimit is how many ledger rows each measured verify checks.
	VerifyLimit int         `json:"verify_limit"`
	Steps       []ScaleStep `json:"steps"`
	// The figures at the last step (the summary's *_1m keys).
	SubjectFetchP99MS float64 `json:"subject_fetch_p99_ms"`
	HoldPlaceMS       float64 `json:"hold_place_ms"`
	PurgeScanMS       float64 `json:"purge_scan_ms"`
	VerifyPeakRSSMiB  float64 `json:"verify_peak_rss_mib"`
}

// ScaleStep is one size of the scale scenario.
type ScaleStep struct {
	Archives          int64     `json:"archives"`
	BookSeconds       float64   `json:"book_s"`
	IndexEntries      int64     `json:"index_entries"`
	SubjectFetchP50MS float64   `json:"subject_fetch_p50_ms"`
	SubjectFetchP99MS float64   `json:"subject_fetch_p99_ms"`
	HoldPlaceMS       float64   `json:"hold_place_ms"`
	HoldReleaseMS     float64   `json:"hold_release_ms"`
	PurgeScanMS       float64   `json:"purge_scan_ms"`
	HoldPlaceRuns     []float64 `json:"hold_place_runs_ms"`
	PurgeScanRuns     []float64 `json:"purge_scan_runs_ms"`
	VerifySeconds     float64   `json:"verify_s"`
	VerifyChecked     int       `json:"verify_checked"`
	VerifyBaseRSSMiB  float64   `json:"verify_base_rss_mib"`
	VerifyPeakRSSMiB  float64   `json:"verify_peak_rss_mib"`
	// Bytes on disk (table, TOAST, indexes) per archive.
	LedgerBytesPerArchive float64 `json:"ledger_bytes_per_archive"`
	IndexBytesPerArchive  float64 `json:"index_bytes_per_archive"`
	CaseBytesPerArchive   float64 `json:"case_bytes_per_archive"`
}
