package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/services/rules"
)

// Scale scenario constants.
const (
	// scaleSubjectsPerArchive is how many subjects (cases) an archive of
	// the scale scenario carries. A rules archive is one pass's batch of
	// 1,000 evaluations, and a case is evaluated against its rules in one
	// burst (the read scenario's readSubjectsPerArchive): about ten cases a
	// batch. CRAIG_BENCH_SCALE_SUBJECTS changes it; the index's bytes per
	// entry are reported so another mix can be read off the table.
	scaleSubjectsPerArchive = 10
	// scaleBookChunk is how many archives one booking statement inserts
	// (the seeding is not measured).
	scaleBookChunk = 100_000
	// scaleVerifyLimit is how many ledger rows each measured verify checks
	// (deep): the archives of the scale ledger have no objects, and what
	// grows with the ledger is the rest of the verify (the orphan listing
	// against every key the ledger names), which runs whatever the limit.
	scaleVerifyLimit = 1_000
	// scaleFetches is how many subject fetches each step measures.
	scaleFetches = 50
	// scaleHoldSubject is the subject the measured holds name: the one the
	// fetch asks for (in readSubjectArchives archives).
	scaleHoldSubject = "case:9000000001"
)

// runScale books ScaleArchives archives in steps (a hundredth, a tenth,
// all) with their subject index and case rows, and measures at each step
// what an operator does against a ledger that size: a subject's rows
// fetched through the API, a subject hold placed and released, the purge's
// candidate scan, a deep verify's peak memory, and the bytes on disk per
// archive. Only the archives the subject fetch reads have objects.
func (r *runner) runScale(ctx context.Context) (*ScaleResult, error) {
	w, cleanup, err := r.readWorld(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	w.archives = readSubjectArchives
	res := &ScaleResult{Archives: r.cfg.ScaleArchives, SubjectsPerArchive: r.cfg.ScaleSubjects, RowsPerArchive: r.cfg.ReadRowsPerArchive,
		VerifyLimit: scaleVerifyLimit}
	if err := w.seed(ctx, readSubjectArchives, r.cfg.ReadRowsPerArchive); err != nil {
		return nil, fmt.Errorf("seed the scale scenario's read archives: %w", err)
	}
	mgr, err := lifecycle.New(w.pool, w.st, lifecycle.Config{Service: w.service, SubjectKey: w.key}, slog.New(slog.NewTextHandler(io.Discard, nil)), mustPurgeMetrics())
	if err != nil {
		return nil, err
	}
	reader := archiveread.New(w.pool, w.st, w.service, rules.Spec().Archive.Tables()).WithSubjectKey(w.key)
	booked := int64(readSubjectArchives)
	for _, target := range scaleSteps(r.cfg.ScaleArchives) {
		start := time.Now()
		if err := r.bookScale(ctx, w, booked, target); err != nil {
			return nil, err
		}
		booked = target
		step := ScaleStep{Archives: target, BookSeconds: round3(time.Since(start).Seconds())}
		r.cfg.logf("scale: %d archives booked (%.1f s)", target, step.BookSeconds)
		if err := r.measureScale(ctx, w, mgr, reader, &step); err != nil {
			return nil, fmt.Errorf("scale at %d archives: %w", target, err)
		}
		r.cfg.logf("scale %d: subject fetch p99 %.1f ms, hold %.1f ms, release %.1f ms, purge scan %.1f ms, verify peak %.1f MiB (base %.1f), %.0f + %.0f + %.0f bytes/archive",
			target, step.SubjectFetchP99MS, step.HoldPlaceMS, step.HoldReleaseMS, step.PurgeScanMS, step.VerifyPeakRSSMiB, step.VerifyBaseRSSMiB,
			step.LedgerBytesPerArchive, step.IndexBytesPerArchive, step.CaseBytesPerArchive)
		res.Steps = append(res.Steps, step)
	}
	last := res.Steps[len(res.Steps)-1]
	res.SubjectFetchP99MS, res.HoldPlaceMS, res.PurgeScanMS, res.VerifyPeakRSSMiB = last.SubjectFetchP99MS, last.HoldPlaceMS, last.PurgeScanMS, last.VerifyPeakRSSMiB
	return res, nil
}

// scaleSteps are the sizes measured: a hundredth, a tenth and all of n.
func scaleSteps(n int) []int64 {
	return []int64{int64(max(n/100, readSubjectArchives+1)), int64(max(n/10, readSubjectArchives+2)), int64(max(n, readSubjectArchives+3))}
}

// bookScale books archives from+1..to (ledger rows, subject index, case
// rows) in chunks, then analyzes the tables as autovacuum would.
func (r *runner) bookScale(ctx context.Context, w *readWorld, from, to int64) error {
	prefix := "archive/" + w.service + "/rule_evaluations/scale/"
	for lo := from; lo < to; lo += scaleBookChunk {
		hi := min(lo+scaleBookChunk, to)
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{scaleBookLedger, []any{lo, hi, prefix}},
			{scaleBookSubjects, []any{lo, hi, prefix, r.cfg.ScaleSubjects}},
			{scaleBookCases, []any{lo, hi, prefix, r.cfg.ScaleSubjects}},
		} {
			if _, err := w.pool.Exec(ctx, q.sql, q.args...); err != nil {
				return fmt.Errorf("book archives %d..%d: %w", lo+1, hi, err)
			}
		}
	}
	_, err := w.pool.Exec(ctx, "VACUUM (ANALYZE) archive_ledger, archive_subjects, archive_cases")
	return err
}

// measureScale takes one step's figures: Rounds of each, medians.
func (r *runner) measureScale(ctx context.Context, w *readWorld, mgr *lifecycle.Manager, reader *archiveread.Reader, step *ScaleStep) error {
	fetch, err := w.fetchSubject(ctx, scaleFetches)
	if err != nil {
		return err
	}
	step.IndexEntries, step.SubjectFetchP50MS, step.SubjectFetchP99MS = int64(fetch.IndexRows), fetch.FetchP50MS, fetch.FetchP99MS
	var place, release, scan []float64
	for round := range r.cfg.Rounds {
		start := time.Now()
		h, err := mgr.PlaceHold(ctx, lifecycle.HoldRequest{Title: "bench scale", Reason: "bench", Subjects: []string{scaleHoldSubject}}, "bench:scale")
		if err != nil {
			return fmt.Errorf("place a subject hold: %w", err)
		}
		place = append(place, ms(time.Since(start)))
		if len(h.Covers) != readSubjectArchives {
			return fmt.Errorf("the subject hold covers %d archives, want %d", len(h.Covers), readSubjectArchives)
		}
		start = time.Now()
		if _, err := mgr.ReleaseHold(ctx, h.ID, "bench", "bench:scale"); err != nil {
			return fmt.Errorf("release the subject hold: %w", err)
		}
		release = append(release, ms(time.Since(start)))
		start = time.Now()
		pr, err := mgr.Purge(ctx, lifecycle.MaxPurgeLimit, true, "bench:scale")
		if err != nil {
			return fmt.Errorf("purge dry run: %w", err)
		}
		scan = append(scan, ms(time.Since(start)))
		if len(pr.Candidates) == 0 {
			return fmt.Errorf("round %d: the purge scan found no due archive", round+1)
		}
	}
	step.HoldPlaceMS, step.HoldReleaseMS, step.PurgeScanMS = round3(median(place)), round3(median(release)), round3(median(scan))
	step.HoldPlaceRuns, step.PurgeScanRuns = place, scan
	if err := r.verifyMemory(ctx, reader, step); err != nil {
		return err
	}
	var ledger, index, cases, n int64
	if err := w.pool.QueryRow(ctx, scaleSizes).Scan(&ledger, &index, &cases, &n); err != nil {
		return err
	}
	step.LedgerBytesPerArchive = round3(float64(ledger) / float64(n))
	step.IndexBytesPerArchive = round3(float64(index) / float64(n))
	step.CaseBytesPerArchive = round3(float64(cases) / float64(n))
	return nil
}

// verifyMemory runs a deep verify of scaleVerifyLimit ledger rows (and
// the orphan listing against the whole ledger) and records this process's
// peak resident set during it, the peak reset just before (Linux:
// /proc/self/clear_refs); the base is the resident set at the reset.
func (r *runner) verifyMemory(ctx context.Context, reader *archiveread.Reader, step *ScaleStep) error {
	runtime.GC()
	debug.FreeOSMemory()
	base, ok := resetPeakRSS()
	start := time.Now()
	rep, err := reader.Verify(ctx, true, scaleVerifyLimit)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	step.VerifySeconds = round3(time.Since(start).Seconds())
	step.VerifyChecked = rep.Checked
	if ok {
		peak, _ := processPeakRSS()
		step.VerifyBaseRSSMiB, step.VerifyPeakRSSMiB = round3(float64(base)/(1<<20)), round3(float64(peak)/(1<<20))
	}
	return nil
}

// mustPurgeMetrics are the purge metrics on a registry of their own.
func mustPurgeMetrics() *metrics.Purge {
	pm, err := metrics.NewPurge(prometheus.NewRegistry())
	if err != nil {
		panic(err) // a fresh registry has no collector to collide with
	}
	return pm
}
