package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/services/rules"
)

// Disposition batch constants.
const (
	// batchDueCasesPerArchive and batchOtherCasesPerArchive: each archive
	// holds the rows of ten due cases (closed, each in this archive only)
	// and of ten open ones, alternately: half its rows are destroyed.
	batchDueCasesPerArchive   = 10
	batchOtherCasesPerArchive = 10
	// batchOpenCaseBase numbers the open cases apart from the due ones.
	batchOpenCaseBase = 1_000_000_000
	// batchExpungeSample is how many of the due cases are expunged one
	// court order at a time, first: each order's time, times the batch's
	// cases, is what expunging the batch's cases one at a time costs.
	batchExpungeSample = 10
)

// runDispositions is the disposition scenario: the due listing, then one
// batch's execution.
func (r *runner) runDispositions(ctx context.Context) (*DispositionResult, error) {
	res, err := r.runDisposition(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.runDispositionBatch(ctx, res); err != nil {
		return nil, fmt.Errorf("disposition batch: %w", err)
	}
	return res, nil
}

// batchCase is the case of row j of archive i in the batch world: even
// rows are due cases', odd rows open cases'.
func batchCase(i, j int) int {
	if j%2 == 0 {
		return 1 + i*batchDueCasesPerArchive + (j/2)%batchDueCasesPerArchive
	}
	return batchOpenCaseBase + i*batchOtherCasesPerArchive + (j/2)%batchOtherCasesPerArchive
}

// runDispositionBatch measures a disposition batch's execution (ADR-073):
// DispositionArchives archives of DispositionRowsPerArchive rows in the
// real store, batchDueCasesPerArchive due cases in each (every due case in
// one archive only), one batch of every due case approved: its rows per
// second (disposition_batch_rows_per_s), against expunging the same cases
// one court order at a time (disposition_vs_expunge_ratio; the orders'
// time is extrapolated from batchExpungeSample orders, each rewriting one
// archive). One round: a batch destroys what it measures.
func (r *runner) runDispositionBatch(ctx context.Context, res *DispositionResult) error {
	w, cleanup, err := r.readWorld(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	w.cases, w.archives = batchCase, r.cfg.DispositionArchives
	n, rows := r.cfg.DispositionArchives, r.cfg.DispositionRowsPerArchive
	b := &BatchResult{Archives: n, RowsPerArchive: rows, DueCases: n * batchDueCasesPerArchive}
	res.Batch = b
	start := time.Now()
	if err := w.seed(ctx, n, rows); err != nil {
		return fmt.Errorf("seed the disposition batch: %w", err)
	}
	specs := rules.ArchiveTables()
	f, reader, orders, err := r.batchWorld(ctx, w, specs, b.DueCases)
	if err != nil {
		return err
	}
	left, err := indexAll(ctx, reader)
	if err != nil || left > 0 {
		return fmt.Errorf("index the batch's archives by case (%d left): %w", left, err)
	}
	b.SeedSeconds = round3(time.Since(start).Seconds())
	r.cfg.logf("disposition batch: %d archives of %d rows booked and indexed in %.1f s", n, rows, b.SeedSeconds)
	if err := r.expungeSample(ctx, orders, b); err != nil {
		return err
	}
	if _, err := indexAll(ctx, reader); err != nil {
		return err
	}
	return r.executeBatch(ctx, f, b)
}

// expungeSample expunges the first batchExpungeSample due cases one court
// order at a time (request and approval) and records one's mean time.
func (r *runner) expungeSample(ctx context.Context, orders *courtorder.Orders, b *BatchResult) error {
	sample := min(batchExpungeSample, b.DueCases/2)
	t0 := time.Now()
	for c := 1; c <= sample; c++ {
		s, err := subject.Parse("case:" + strconv.Itoa(c))
		if err != nil {
			return err
		}
		req, err := orders.RequestExpunge(ctx, s, "BENCH-"+strconv.Itoa(c), "bench", nil, "bench:alice")
		if err != nil {
			return fmt.Errorf("expunge case %d: %w", c, err)
		}
		if _, err := orders.Approve(ctx, req.ExpungeID, "bench:bob"); err != nil {
			return fmt.Errorf("expunge case %d: %w", c, err)
		}
	}
	b.ExpungeSample = sample
	b.ExpungeSecondsPerCase = round3(time.Since(t0).Seconds() / float64(sample))
	r.cfg.logf("disposition batch: %d cases expunged one order at a time, %.3f s each", sample, b.ExpungeSecondsPerCase)
	return nil
}

// executeBatch freezes every due case left in one batch and measures its
// approval.
func (r *runner) executeBatch(ctx context.Context, f *disposition.Finder, b *BatchResult) error {
	batch, err := f.Freeze(ctx, disposition.MaxLimit, "bench:alice")
	if err != nil {
		return fmt.Errorf("freeze the batch: %w", err)
	}
	t1 := time.Now()
	done, err := f.Approve(ctx, batch.ID, "bench:bob")
	if err != nil {
		return fmt.Errorf("execute the batch: %w", err)
	}
	secs := time.Since(t1).Seconds()
	b.BatchCases, b.RowsDestroyed, b.ArchivesRewritten, b.ArchivesPurged = done.CasesDestroyed, done.RowsDestroyed, done.ArchivesRewritten, done.ArchivesPurged
	b.BatchSeconds = round3(secs)
	b.RowsPerSec = round3(float64(done.RowsDestroyed) / secs)
	b.VsExpungeRatio = round3(b.ExpungeSecondsPerCase * float64(done.CasesDestroyed) / secs)
	r.cfg.logf("disposition batch: %d cases, %d rows destroyed, %d archives rewritten in %.1f s: %.0f rows/s, %.1f× expunging them one order at a time",
		done.CasesDestroyed, done.RowsDestroyed, done.ArchivesRewritten, secs, b.RowsPerSec, b.VsExpungeRatio)
	return nil
}

// batchWorld puts the batch's schedule in force, closes its due cases,
// and returns the finder (with its execution), the reader and the court
// orders of the world.
func (r *runner) batchWorld(ctx context.Context, w *readWorld, specs []archive.TableSpec, due int) (*disposition.Finder, *archiveread.Reader, *courtorder.Orders, error) {
	series := []schedule.Series{{Table: evaluationsTable}}
	sch := schedule.New(w.pool, series)
	doc, err := schedule.Parse([]byte(dispositionSchedule), series)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := sch.Propose(ctx, doc, "bench:alice"); err != nil {
		return nil, nil, nil, err
	}
	if _, err := sch.Approve(ctx, doc.Version, "bench:bob", true); err != nil {
		return nil, nil, nil, err
	}
	closed := time.Now().UTC().AddDate(0, 0, -30)
	clocks := make([][]any, 0, due)
	for c := 1; c <= due; c++ {
		s, err := subject.Parse("case:" + strconv.Itoa(c))
		if err != nil {
			return nil, nil, nil, err
		}
		clocks = append(clocks, []any{w.key.Hash(s), "closed", closed, "x", closed})
	}
	if _, err := w.pool.CopyFrom(ctx, pgx.Identifier{"case_clocks"}, []string{"subject_hash", "state", "closed_at", "classification", "changed_at"},
		pgx.CopyFromRows(clocks)); err != nil {
		return nil, nil, nil, fmt.Errorf("clocks: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	orders, err := courtorder.New(w.pool, w.st, courtorder.Config{Service: w.service, Tables: specs, Key: w.key,
		Bookkeep: rules.Spec().Archive.Bookkeeper.Bookkeep}, logger)
	if err != nil {
		return nil, nil, nil, err
	}
	reader := archiveread.New(w.pool, w.st, w.service, specs).WithSubjectKey(w.key)
	f := disposition.NewFinder(w.pool, w.key, specs, sch).WithExecution(disposition.Execution{Service: w.service, Orders: orders, Store: w.st,
		Index: func(ctx context.Context) (int64, error) { return indexAll(ctx, reader) }})
	return f, reader, orders, nil
}

// indexAll indexes every archive by case; it returns how many are left.
func indexAll(ctx context.Context, reader *archiveread.Reader) (int64, error) {
	for {
		rep, err := reader.IndexCaseRows(ctx, 500)
		if err != nil || rep.Left == 0 || rep.Indexed == 0 {
			return rep.Left, err
		}
	}
}
