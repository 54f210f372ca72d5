package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// summarize fills the summary and the goal table from what was measured.
func summarize(res *Results) (Summary, []Goal) {
	var s Summary
	var kernel *DrainConfig
	if res.Drain != nil {
		for i := range res.Drain.Configs {
			if res.Drain.Configs[i].Name == cfgKernel {
				kernel = &res.Drain.Configs[i]
			}
		}
	}
	if kernel != nil {
		s.BacklogDrainRatio = ptr(kernel.Ratio)
		s.WorstBatchMS = ptr(kernel.WorstBatchMS)
	}
	steadyWhat := "steady cycle with nothing eligible"
	if res.Steady != nil {
		s.SteadyIdleCycleMS = ptr(res.Steady.IdleCycleMS)
		steadyWhat += " on " + thousands(int64(res.Steady.Rows)) + " rows"
	}
	summarizeWriter(res.Writer, &s)
	rssGoal := "≤ 64 MiB + max_batch_bytes"
	if res.Archive != nil {
		s.ArchiveVsCopyRatio = ptr(res.Archive.Ratio)
		if res.Archive.PeakRSSMiB > 0 {
			s.ArchivePeakRSSMiB = ptr(round3(res.Archive.PeakRSSMiB))
		}
		rssGoal = fmt.Sprintf("≤ 64 MiB + max_batch_bytes (%s MiB)", trim(res.Archive.RSSGoalMiB, 0))
	}
	goals := []Goal{
		goal("backlog drain (ratio to one unbounded DELETE)", "≥ 0.90", s.BacklogDrainRatio, "×", func(v float64) bool { return v >= 0.90 }),
		goal("worst batch", "≤ 250 ms", s.WorstBatchMS, "ms", func(v float64) bool { return v <= 250 }),
		goal(steadyWhat, "≤ 50 ms", s.SteadyIdleCycleMS, "ms", func(v float64) bool { return v <= 50 }),
		goal("writer p99 during a drain (ratio to no sweep)", "≤ 1.2×", s.WriterP99Ratio, "×", func(v float64) bool { return v <= 1.2 }),
		goal("archive pass (ratio to COPY)", "≥ 0.5×", s.ArchiveVsCopyRatio, "×", func(v float64) bool { return v >= 0.5 }),
		goal("archive peak RSS", rssGoal, s.ArchivePeakRSSMiB, "MiB", func(v float64) bool {
			return res.Archive != nil && v <= res.Archive.RSSGoalMiB
		}),
	}
	summarizeLifecycle(res, &s)
	goals = append(goals,
		goal("purge of 100 archives against the local store", "≥ 50/s", s.PurgeArchivesPerS, "archives/s", func(v float64) bool { return v >= 50 }),
		goal("security archive pass of audit_log (ratio to COPY)", "≥ 0.5×", s.SecurityArchiveVsCopyRatio, "×", func(v float64) bool { return v >= 0.5 }),
		goal("inbound signed archive events into archive_records", "≥ 1,000/s", s.FleetEventsPerS, "events/s", func(v float64) bool { return v >= 1000 }),
		goal("fetch an archived row by id through the API (p99)", "≤ 100 ms", s.FetchByIDP99MS, "ms", func(v float64) bool { return v <= 100 }),
		goal("deep verify (ratio to GET + sha256 of the same objects)", "≥ 0.7×", s.VerifyDeepVsGetRatio, "×", func(v float64) bool { return v >= 0.7 }),
		goal("fetch every row of a subject in 5 of 10,000 archives through the API (p99)", "≤ 500 ms", s.SubjectFetchP99MS, "ms", func(v float64) bool { return v <= 500 }),
		goal("archive pass with the subject index (ratio to without)", "≥ 0.85×", s.SubjectIndexArchiveCostRatio, "×", func(v float64) bool { return v >= 0.85 }),
		goal("list what the records schedule makes due over 10,000 archives", "≤ 1,000 ms", s.DispositionDueListMS, "ms", func(v float64) bool { return v <= 1000 }),
		goal("a disposition batch of 10,000 cases over 1,000 archives (ratio to one court order per case)", "≥ 10×", s.DispositionVsExpungeRatio, "×",
			func(v float64) bool { return v >= 10 }))
	goals = append(goals, scaleGoals(&s)...)
	goals = append(goals, agencyGoals(res, &s)...)
	for _, big := range bigRowRuns(res.Archive) {
		goals = append(goals, goal(fmt.Sprintf("archive peak RSS, %d KiB rows at batch size %s", big.RowBytes>>10, thousands(int64(big.BatchSize))),
			fmt.Sprintf("≤ 64 MiB + 2 × max_batch_bytes (%s MiB)", trim(big.RSSGoalMiB, 0)), ptr(round3(big.PeakRSSMiB)), "MiB",
			func(v float64) bool { return v <= big.RSSGoalMiB }))
	}
	return s, goals
}

// summarizeWriter fills the summary's writer figures.
func summarizeWriter(w *WriterResult, s *Summary) {
	if w == nil {
		return
	}
	s.WriterP99Ratio = ptr(w.P99Ratio)
	ci := w.P99RatioCI
	s.WriterP99RatioCI = &ci
	if w.VsFloor > 0 {
		fci := w.VsFloorCI
		s.WriterP99VsFloor, s.WriterP99VsFloorCI = ptr(w.VsFloor), &fci
	}
}

// scaleGoals are the partition and writer-floor goals (bench/README.md).
func scaleGoals(s *Summary) []Goal {
	return []Goal{
		goal("partition retirement (ratio to one unbounded DELETE, unpartitioned)", "≥ 20×", s.PartitionDrainRatio, "×", func(v float64) bool { return v >= 20 }),
		goal("WAL per retired row, partitioned", "≤ 5 bytes", s.PartitionWALBytesPerRow, "bytes", func(v float64) bool { return v <= 5 }),
		goal("writer p99 during partition retirement (ratio to none)", "≤ 1.5×", s.PartitionWriterP99Ratio, "×", func(v float64) bool { return v <= 1.5 }),
		goal("partition retirement vs pg_partman's own retention (time ratio)", "≤ 1.25×", s.PartitionVsPartmanRatio, "×", func(v float64) bool { return v <= 1.25 }),
		goal("partition retirement at 200,000 rows a partition (drain ratio ÷ pg_partman's, same partitions)", "≥ 0.8×", s.PartitionDrainVsPartmanRatio200k, "×", func(v float64) bool { return v >= 0.8 }),
		goal("partition retirement at 1,000,000 rows a partition (drain ratio ÷ pg_partman's, same partitions)", "≥ 0.8×", s.PartitionDrainVsPartmanRatio1m, "×", func(v float64) bool { return v >= 0.8 }),
		goal("writer p99 during a drain ÷ beside one CPU-only backend (same round)", "≤ 1.2×", s.WriterP99VsFloor, "×", func(v float64) bool { return v <= 1.2 }),
	}
}

// agencyGoals are the goals against a ledger of an agency's size (the
// scale scenario, and the fleet ledger with as many rows booked).
func agencyGoals(res *Results, s *Summary) []Goal {
	size := "1,000,000"
	if sc := res.Scale; sc != nil {
		last := sc.Steps[len(sc.Steps)-1]
		s.SubjectFetchP99MS1m, s.HoldPlaceMS1m, s.PurgeScanMS1m = ptr(sc.SubjectFetchP99MS), ptr(sc.HoldPlaceMS), ptr(sc.PurgeScanMS)
		if sc.VerifyPeakRSSMiB > 0 {
			s.VerifyPeakRSSMiB1m = ptr(sc.VerifyPeakRSSMiB)
		}
		s.LedgerBytesPerArchive1m = ptr(round3(last.LedgerBytesPerArchive + last.IndexBytesPerArchive + last.CaseBytesPerArchive))
		size = thousands(last.Archives)
	}
	if res.Archive != nil && res.Archive.FloorRatio > 0 {
		s.ArchiveVsFloorRatio = ptr(res.Archive.FloorRatio)
	}
	if res.SecurityArchive != nil && res.SecurityArchive.FloorRatio > 0 {
		s.SecurityArchiveVsFloorRatio = ptr(res.SecurityArchive.FloorRatio)
	}
	if f := res.Fleet; f != nil && f.BookedRatio > 0 {
		s.FleetInboundRatio1m = ptr(f.BookedRatio)
	}
	return []Goal{
		goal("rules archive pass (ratio to the same work by hand)", "≥ 0.8×", s.ArchiveVsFloorRatio, "×", func(v float64) bool { return v >= 0.8 }),
		goal("security archive pass (ratio to the same work by hand)", "≥ 0.8×", s.SecurityArchiveVsFloorRatio, "×", func(v float64) bool { return v >= 0.8 }),
		goal("fetch every row of a subject in 5 of "+size+" archives through the API (p99)", "≤ 500 ms", s.SubjectFetchP99MS1m, "ms", func(v float64) bool { return v <= 500 }),
		goal("place a subject hold against "+size+" archives", "≤ 1,000 ms", s.HoldPlaceMS1m, "ms", func(v float64) bool { return v <= 1000 }),
		goal("the purge's candidate scan over "+size+" archives", "≤ 1,000 ms", s.PurgeScanMS1m, "ms", func(v float64) bool { return v <= 1000 }),
		goal("inbound signed events with the fleet ledger full (ratio to empty)", "≥ 0.9×", s.FleetInboundRatio1m, "×", func(v float64) bool { return v >= 0.9 }),
	}
}

// bigRowRuns are the archive's big-row runs that measured a peak RSS.
func bigRowRuns(a *ArchiveResult) []*ArchiveBigRows {
	var out []*ArchiveBigRows
	if a == nil {
		return nil
	}
	for _, big := range []*ArchiveBigRows{a.BigRows, a.HugeRows} {
		if big != nil && big.PeakRSSMiB > 0 {
			out = append(out, big)
		}
	}
	return out
}

// summarizeLifecycle fills the summary's figures of the archive lifecycle
// scenarios (security archive, fleet, purge, read).
func summarizeLifecycle(res *Results, s *Summary) {
	if res.SecurityArchive != nil {
		s.SecurityArchiveVsCopyRatio = ptr(res.SecurityArchive.Ratio)
	}
	if res.Fleet != nil {
		s.FleetEventsPerS = ptr(res.Fleet.EventsPerSec)
	}
	if res.Purge != nil {
		s.PurgeArchivesPerS = ptr(res.Purge.ArchivesPerSec)
	}
	if res.Read != nil {
		s.FetchByIDP99MS, s.VerifyDeepVsGetRatio = ptr(res.Read.FetchP99MS), ptr(res.Read.VerifyVsGetRatio)
		if res.Read.Subject != nil {
			s.SubjectFetchP99MS = ptr(res.Read.Subject.FetchP99MS)
		}
	}
	if res.Disposition != nil {
		s.DispositionDueListMS = ptr(res.Disposition.DueListMS)
		if b := res.Disposition.Batch; b != nil {
			s.DispositionBatchRowsPerS, s.DispositionVsExpungeRatio = ptr(b.RowsPerSec), ptr(b.VsExpungeRatio)
		}
	}
	if res.Outbox != nil {
		s.OutboxDrainRowsPerS, s.OutboxPoisonDrainRatio = ptr(res.Outbox.CleanRowsPerSec), ptr(res.Outbox.Ratio)
	}
	if res.Archive != nil && res.Archive.SubjectIndexCostRatio > 0 {
		s.SubjectIndexArchiveCostRatio = ptr(res.Archive.SubjectIndexCostRatio)
	}
	if res.Partition != nil {
		s.PartitionDrainRatio, s.PartitionWALBytesPerRow = ptr(res.Partition.Ratio), ptr(res.Partition.WALBytesPerRow)
		s.PartitionWriterP99Ratio, s.PartitionBloatRatio = ptr(res.Partition.Writer.P99Ratio), ptr(res.Partition.Bloat.SizeRatio)
		if res.Partition.PartmanRatio > 0 {
			s.PartitionVsPartmanRatio = ptr(res.Partition.PartmanRatio)
		}
		for _, v := range res.Partition.Volumes {
			var vsPartman *float64
			if v.PartmanRatio > 0 {
				vsPartman = ptr(round3(1 / v.PartmanRatio))
			}
			switch {
			case v.RowsPerPartition >= 1_000_000 || (res.Smoke && v.RowsPerPartition >= 10_000):
				s.PartitionDrainRatio1m, s.PartitionDrainVsPartmanRatio1m = ptr(v.Ratio), vsPartman
			default:
				s.PartitionDrainRatio200k, s.PartitionDrainVsPartmanRatio200k = ptr(v.Ratio), vsPartman
			}
		}
	}
}

func goal(what, target string, v *float64, unit string, ok func(float64) bool) Goal {
	g := Goal{What: what, Goal: target, Measured: v, Unit: unit}
	if v != nil {
		g.Met = ptr(ok(*v))
	}
	return g
}

// WriteJSON writes the results to dir/<date>.json (through a .tmp file
// renamed into place) and returns the path.
func WriteJSON(res *Results, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("results directory: %w", err)
	}
	name := res.Date
	if res.Smoke {
		name += "-smoke"
	}
	path := filepath.Join(dir, name+".json")
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode results: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write results: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write results: %w", err)
	}
	return path, nil
}

// Markdown renders the results as the tables bench/README.md shows.
func Markdown(res *Results) string {
	var b strings.Builder
	writeMachine(&b, res)
	if d := res.Drain; d != nil {
		writeDrain(&b, res, d)
	}
	if s := res.Steady; s != nil {
		writeSteady(&b, s)
	}
	if w := res.Writer; w != nil {
		writeWriter(&b, res, w)
	}
	if a := res.Archive; a != nil {
		writeArchive(&b, a)
	}
	if a := res.SecurityArchive; a != nil {
		writeArchive(&b, a)
	}
	if p := res.Purge; p != nil {
		fmt.Fprintf(&b, "\nPurge: %d due archives destroyed by one call (re-check under a row lock, manifest then data deleted, stamp; then the certificate): median %s archives/s.\n",
			p.Archives, trim(p.ArchivesPerSec, 0))
	}
	if rd := res.Read; rd != nil {
		fmt.Fprintf(&b, "\nRead: %s ledger rows of %s rows on the S3 server; %d random archived rows fetched by id through the archive API (JWT, ledger range, GET, sha256, line): p50 %s ms, p99 %s ms; a deep verify of %s archives through the API against a GET + sha256 of the same data objects: median ratio %s.\n",
			thousands(int64(rd.Archives)), thousands(int64(rd.RowsPerArchive)), rd.Fetches, trim(rd.FetchP50MS, 2), trim(rd.FetchP99MS, 2),
			thousands(int64(rd.VerifyArchives)), trim(rd.VerifyVsGetRatio, 3))
	}
	if f := res.Fleet; f != nil {
		fmt.Fprintf(&b, "\nFleet ledger: %s signed rules.evaluations_archived events per round through RabbitMQ into security's archive_records: median %s events/s.\n",
			thousands(int64(f.Events)), trim(f.EventsPerSec, 0))
	}
	writeGoals(&b, res)
	return b.String()
}

// writeMachine writes the run's header: date, rounds, machine and load.
func writeMachine(b *strings.Builder, res *Results) {
	m := res.Machine
	fmt.Fprintf(b, "Run of %s: %d rounds per configuration, interleaved, medians; every ratio is measured side by side in this run.\n", res.Date, res.Config.Rounds)
	busy := "idle apart from the run"
	if m.Busy {
		busy = fmt.Sprintf("BUSY: other sessions were active (mean %.1f, max %d), so absolute timings are noisy", m.OtherBackendsMean, m.OtherBackendsMax)
	}
	fmt.Fprintf(b, "Machine: %d CPUs, %d GiB, PostgreSQL %s, %s; load %.2f before, mean %.2f during; %s.\n",
		m.CPUs, m.MemGiB, m.Postgres, m.Go, m.LoadBefore, m.LoadMean, busy)
	if res.Smoke {
		b.WriteString("SMOKE RUN (tiny sizes): the numbers only show that the harness works.\n")
	}

}

// writeDrain writes the backlog-drain table.
func writeDrain(b *strings.Builder, res *Results, d *DrainResult) {
	fmt.Fprintf(b, "\n**Backlog drain**: %s-row `event_outbox`, %s eligible (45%%), window %d d.\n\n",
		thousands(int64(d.Rows)), thousands(d.Eligible), res.Config.WindowDays)
	b.WriteString("| way of draining the backlog | rows/s | ratio to one unbounded DELETE | worst batch (ms) | WAL bytes/row | batches |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, c := range d.Configs {
		batches := strconv.Itoa(c.Batches)
		if c.TimeBoxed {
			batches += fmt.Sprintf(" in the box; whole backlog ≈ %s s extrapolated", trim(c.ExtrapolatedSeconds, 0))
		}
		fmt.Fprintf(b, "| %s | %s | **%s** | %s | %s | %s |\n", c.Label, thousands(int64(c.RowsPerSec)), trim(c.Ratio, 3),
			trim(c.WorstBatchMS, 1), trim(c.WALPerRow, 0), batches)
	}
	fmt.Fprintf(b, "\nKernel: batch %d, statement timeout %d ms, lock timeout %d ms; worst batch is the longest time locks were held (a statement that commits on its own, as the kernel's batches on its connection do, or BEGIN…COMMIT), median over rounds (max of all rounds %s ms). WAL is the cluster-wide insert-position difference.\n",
		d.Kernel.BatchSize, d.Kernel.StatementTimeoutMS, d.Kernel.LockTimeoutMS, trim(d.Kernel.WorstBatchMaxMS, 1))
	if d.Kernel.YieldedMax > 0 {
		fmt.Fprintf(b, "Up to %d of a kernel drain's batches ran at the yield batch size because another session of the server committed a write (`prune_yield_to_writers`; autovacuum's ANALYZE writes too), so its rate understates a quiet server's.\n", d.Kernel.YieldedMax)
	}
}

// writeSteady writes the steady-state table.
func writeSteady(b *strings.Builder, s *SteadyResult) {
	fmt.Fprintf(b, "\n**Steady state**: %s-row `event_outbox` spanning the window + 1 h; one full sweep cycle (`Sweeper.RunOnce`: lease, outbox, backlog gauge, inbox), an idle connection in the pool as in `serve` unless said.\n\n", thousands(int64(s.Rows)))
	b.WriteString("| cycle | ms |\n|---|---:|\n")
	fmt.Fprintf(b, "| hourly cycle (%s rows eligible) | %s |\n", thousands(s.HourlyDeleted), trim(s.HourlyCycleMS, 1))
	fmt.Fprintf(b, "| nothing eligible, right after the hourly cycle (dead tuples not vacuumed) | **%s** |\n", trim(s.IdleCycleMS, 1))
	fmt.Fprintf(b, "| nothing eligible, after VACUUM | %s |\n", trim(s.IdleVacuumedCycleMS, 1))
	fmt.Fprintf(b, "| nothing eligible, opening a new connection first (as `sweep --once`) | %s |\n", trim(s.IdleColdCycleMS, 1))
}

// writeWriter writes the writer-impact tables: the configurations and the
// curve.
func writeWriter(b *strings.Builder, res *Results, w *WriterResult) {
	fmt.Fprintf(b, "\n**Writer impact**: a writer staging outbox events (`outbox.Stage`, one transaction each) at %d/s over %d connections, latency from the scheduled time; every configuration at least %s samples a round, all rounds pooled; [95%% bootstrap intervals].\n\n",
		w.RatePerSec, w.Connections, thousands(int64(w.MinSamples)))
	b.WriteString("| writer | samples | p50 (ms) | p99 (ms) | p99.9 (ms) | p99 ratio | drain rows/s |\n|---|---:|---:|---:|---:|---:|---:|\n")
	ci := func(v float64, c [2]float64, digits int) string {
		return fmt.Sprintf("%s [%s, %s]", trim(v, digits), trim(c[0], digits), trim(c[1], digits))
	}
	for _, c := range w.Configs {
		rate := "–"
		if c.DrainRowsPerSec > 0 {
			rate = thousands(int64(c.DrainRowsPerSec))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | **%s** | %s |\n", c.Name, thousands(int64(c.Samples)), ci(c.P50MS, c.P50CI, 2), ci(c.P99MS, c.P99CI, 2),
			ci(c.P999MS, c.P999CI, 2), ci(c.P99Ratio, c.P99RatioCI, 3), rate)
	}
	b.WriteString("\n**Drain rate vs writer p99** (the yield batch size; 0: no yield, full batches):\n\n| yield batch | drain rows/s | samples | writer p99 (ms) | p99 ratio |\n|---:|---:|---:|---:|---:|\n")
	for _, c := range w.Curve {
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s |\n", c.YieldBatch, thousands(int64(c.DrainRowsPerSec)), thousands(int64(c.Samples)), trim(c.P99MS, 2), ci(c.P99Ratio, c.P99RatioCI, 3))
	}
	fmt.Fprintf(b, "\nKnee (the fastest drain within 1.2× p99, or within a tenth of the best ratio): yield batch %d.", w.KneeYieldBatch)
	if d := res.Drain; d != nil {
		for _, c := range d.Configs {
			if c.Name == cfgKernel && c.RowsPerSec > 0 {
				fmt.Fprintf(b, " The drain alone (no writer): %s rows/s.", thousands(int64(c.RowsPerSec)))
			}
		}
	}
	b.WriteString("\n")
}

// writeArchive writes the archive table.
func writeArchive(b *strings.Builder, a *ArchiveResult) {
	service := "rules"
	if a.Table == "audit_log" {
		service = "security"
	}
	fmt.Fprintf(b, "\n**Archive (%s)**: %s aged `%s` (+ %s hot kept), batch %d, max_batch_bytes %s MiB, to the S3 server; `%s archive run` as a child process (start-up and boot probe included).\n\n",
		service, thousands(int64(a.Rows)), a.Table, thousands(int64(a.HotRows)), a.BatchSize, trim(float64(a.MaxBatchBytes)/(1<<20), 0), service)
	b.WriteString("| | rows/s | ratio to COPY | peak RSS (MiB) |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(b, "| archive pass (select, NDJSON, 2 PUTs, delete + ledger + event per batch) | %s | **%s** | %s (max %s) |\n",
		thousands(int64(a.ArchiveRowsPS)), trim(a.Ratio, 3), trim(a.PeakRSSMiB, 1), trim(a.PeakRSSMaxMiB, 1))
	fmt.Fprintf(b, "| `COPY (SELECT to_jsonb(t) …) TO STDOUT` (ceiling) | %s | 1 | – |\n", thousands(int64(a.CopyRowsPS)))
	for _, big := range bigRowRuns(a) {
		fmt.Fprintf(b, "| archive pass of %s rows of %d KiB at batch size %s (the selection stops at max_batch_bytes; %d archives, %s s) | – | – | %s |\n",
			thousands(int64(big.Rows)), big.RowBytes>>10, thousands(int64(big.BatchSize)), big.Archives, trim(big.Seconds, 1), trim(big.PeakRSSMiB, 1))
	}
	b.WriteString("\n`archive fetch`-style lookup by id: not measured (there is no `archive fetch` yet).\n")
}

// writeGoals writes the goals table and the notes.
func writeGoals(b *strings.Builder, res *Results) {
	b.WriteString("\n**Goals**\n\n| what | goal | measured | met |\n|---|---|---:|---|\n")
	for _, g := range res.Goals {
		measured, met := "not measured", "–"
		if g.Measured != nil {
			measured = trim(*g.Measured, 3) + " " + g.Unit
			met = "no"
			if *g.Met {
				met = "yes"
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", g.What, g.Goal, measured, met)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(b, "\nNOTE: %s\n", n)
	}
}

// thousands formats n with comma separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// trim formats v with at most prec decimals, without trailing zeros.
func trim(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
