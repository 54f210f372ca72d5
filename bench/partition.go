package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/migrations"
)

// The partition scenario's layouts of the drain's old rows.
const (
	// layoutClean: no old row is pending (a relay that keeps up): every
	// old day is retired whole. The scenario's headline figures.
	layoutClean = "clean"
	// layoutStuck: the undelivered events of one old day in eight stay
	// pending: those days are kept and their published rows go by batches.
	layoutStuck = "stuck_one_day_in_8"
	stuckEvery  = 8
)

// Writer beside retirement: the rate is higher than the writer scenario's
// (a retirement lasts a fraction of a second, and each round's window is
// one), and the figure pools every round's samples.
const partitionWriterRate = 400

// Bloat simulation: a 7-day window swept daily through 30 days after it
// filled, a day being the drain's rows per day.
const (
	bloatWindowDays = 7
	bloatSteadyDays = 30
)

// runPartition measures partition retirement: the drain's
// volume (DrainRows, 46% old) laid out in daily partitions by pg_partman
// (the conversion operators run), in the two layouts above; the kernel's
// PruneTable with the real outbox policy (whole partitions where no row
// must stay, batches elsewhere; as many calls as cycles would take) against
// one unbounded DELETE of the same rows on the unpartitioned copy, in
// Rounds interleaved rounds; then a writer beside the retirement, and the
// table's size after 30 simulated days of daily sweeps, partitioned and
// row-deleted.
func (r *runner) runPartition(ctx context.Context) (*PartitionResult, error) {
	res := &PartitionResult{Rows: r.cfg.DrainRows}
	tpls := map[string][2]string{}
	for _, layout := range []string{layoutClean, layoutStuck} {
		plain, daily, err := r.partitionTemplates(ctx, layout, seedPartitionOutbox, r.cfg.DrainRows, drainOldRows(r.cfg.DrainRows))
		defer r.discard(plain)
		defer r.discard(daily)
		if err != nil {
			return nil, err
		}
		tpls[layout] = [2]string{plain, daily}
	}
	var err error
	ratios, walPerRow := map[string][]float64{}, map[string][]float64{}
	var perPartition []float64
	for round := range r.cfg.Rounds {
		for _, layout := range []string{layoutClean, layoutStuck} {
			run, err := r.partitionRound(ctx, tpls[layout][0], tpls[layout][1], round)
			if err != nil {
				return nil, fmt.Errorf("partition %s round %d: %w", layout, round+1, err)
			}
			run.Layout = layout
			r.cfg.logf("partition %s round %d/%d: kernel %d rows in %.3f s (%d partitions dropped, %d kept), unbounded DELETE %d rows in %.3f s: ratio %.1f, %.2f WAL bytes/row",
				layout, round+1, r.cfg.Rounds, run.KernelRows, run.KernelSeconds, run.Dropped, run.Kept, run.DeleteRows, run.DeleteSeconds, run.Ratio, run.KernelWALPerRow)
			res.Runs = append(res.Runs, run)
			ratios[layout], walPerRow[layout] = append(ratios[layout], run.Ratio), append(walPerRow[layout], run.KernelWALPerRow)
			if layout == layoutClean && run.Dropped > 0 {
				perPartition = append(perPartition, 1000*run.KernelSeconds/float64(run.Dropped))
			}
		}
	}
	res.Ratio, res.WALBytesPerRow = round3(median(ratios[layoutClean])), round3(median(walPerRow[layoutClean]))
	res.StuckRatio, res.StuckWALBytesPerRow = round3(median(ratios[layoutStuck])), round3(median(walPerRow[layoutStuck]))
	res.MSPerDroppedPartition = round3(median(perPartition))
	res.PartmanRatio, res.PartmanMSPerPartition, res.PartmanPendingLost = partmanFigures(res.Runs)
	if res.Volumes, err = r.partitionVolumes(ctx); err != nil {
		return nil, fmt.Errorf("partition volumes: %w", err)
	}
	w, err := r.partitionWriter(ctx, tpls[layoutClean][1])
	if err != nil {
		return nil, fmt.Errorf("partition writer: %w", err)
	}
	res.Writer = w
	b, err := r.partitionBloat(ctx)
	if err != nil {
		return nil, fmt.Errorf("partition bloat: %w", err)
	}
	res.Bloat = b
	return res, nil
}

// partitionTemplates builds a layout's unpartitioned template and, from a
// copy of it, the partitioned one: the very same rows (seeded once, at one
// instant: two seeds a minute apart put the rows near a midnight on
// different days, and the stuck layout's pending rows with them).
func (r *runner) partitionTemplates(ctx context.Context, layout, seedSQL string, rows, old int) (plain, daily string, err error) {
	plain, daily = r.srv.name("partition_plain_"+layout), r.srv.name("partition_daily_"+layout)
	every := 0
	if layout == layoutStuck {
		every = stuckEvery
	}
	err = r.buildTemplate(ctx, plain, []migrations.Set{migrations.Transport()}, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, seedSQL, rows, old, every); err != nil {
			return fmt.Errorf("seed event_outbox: %w", err)
		}
		return nil
	})
	if err != nil {
		return plain, daily, err
	}
	start := time.Now()
	u, err := r.srv.create(ctx, daily, plain)
	if err != nil {
		return plain, daily, err
	}
	err = withConn(ctx, u, func(conn *pgx.Conn) error {
		if err := convertOutbox(ctx, conn); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "VACUUM (FREEZE, ANALYZE)"); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		return nil
	})
	if err != nil {
		return plain, daily, fmt.Errorf("template %s: %w", daily, err)
	}
	r.cfg.logf("template %s (a converted copy of %s) ready in %s", daily, plain, time.Since(start).Round(100*time.Millisecond))
	return plain, daily, nil
}

// convertOutbox runs the pg_partman conversion operators run.
func convertOutbox(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrations.PartitionOutboxSQL()); err != nil {
			return fmt.Errorf("partition event_outbox (pg_partman: postgresql-<version>-partman): %w", err)
		}
		return nil
	})
}

// partitionRound times the kernel on a copy of the partitioned template and
// the unbounded DELETE on a copy of the plain one (order alternating).
func (r *runner) partitionRound(ctx context.Context, plain, daily string, round int) (PartitionRun, error) {
	run := PartitionRun{Round: round + 1}
	kernel := func() error {
		return r.onCopy(ctx, daily, "kernel", round, func(conn *pgx.Conn) (int64, error) {
			rows, dropped, kept, err := r.retireAll(ctx, &batchTimer{DB: conn})
			run.KernelRows, run.Dropped, run.Kept = rows, dropped, kept
			return rows, err
		}, &run.KernelSeconds, &run.KernelWAL)
	}
	unbounded := func() error {
		return r.onCopy(ctx, plain, "delete", round, func(conn *pgx.Conn) (int64, error) {
			tag, err := conn.Exec(ctx, deleteUnbounded, r.outbox.WindowDays)
			run.DeleteRows = tag.RowsAffected()
			return run.DeleteRows, err
		}, &run.DeleteSeconds, &run.DeleteWAL)
	}
	partman := func() error {
		var wal int64
		var whole float64
		return r.onCopy(ctx, daily, "partman", round, func(conn *pgx.Conn) (int64, error) {
			p, err := partmanRetire(ctx, conn, r.outbox.WindowDays)
			run.PartmanRows, run.PartmanDropped, run.PartmanPendingLost, run.PartmanSeconds = p.rows, p.dropped, p.pendingLost, p.seconds
			return p.rows, err
		}, &whole, &wal)
	}
	steps := []func() error{kernel, unbounded, partman}
	k := round % len(steps) // the order rotates each round
	for _, s := range append(append([]func() error{}, steps[k:]...), steps[:k]...) {
		if err := s(); err != nil {
			return run, err
		}
	}
	if run.KernelRows != run.DeleteRows {
		return run, fmt.Errorf("the kernel retired %d rows, the unbounded DELETE deleted %d: not the same backlog", run.KernelRows, run.DeleteRows)
	}
	run.Ratio = round3((float64(run.KernelRows) / run.KernelSeconds) / (float64(run.DeleteRows) / run.DeleteSeconds))
	run.KernelWALPerRow = round3(perRow(run.KernelWAL, run.KernelRows))
	run.DeleteWALPerRow = round3(perRow(run.DeleteWAL, run.DeleteRows))
	return run, nil
}

// retireAll runs the outbox policy's PruneTable as consecutive cycles
// would, until a call is not capped.
func (r *runner) retireAll(ctx context.Context, db prune.DB) (rows int64, dropped, kept int, err error) {
	for {
		rep, err := prune.PruneTable(ctx, db, r.outbox)
		if err != nil {
			return rows, dropped, kept, err
		}
		rows += rep.Deleted
		dropped, kept = dropped+len(rep.Partitions.Dropped), kept+len(rep.Partitions.Kept)
		if !rep.Capped {
			return rows, dropped, kept, nil
		}
	}
}

// onCopy runs fn on a fresh copy of template, timing it and measuring its
// WAL.
func (r *runner) onCopy(ctx context.Context, template, label string, round int, fn func(*pgx.Conn) (int64, error), seconds *float64, wal *int64) error {
	db, err := r.srv.copyOf(ctx, template, label, round)
	if err != nil {
		return err
	}
	defer r.discard(db.name)
	return withConn(ctx, db.url, func(conn *pgx.Conn) error {
		var lsn string
		if err := conn.QueryRow(ctx, walInsertLSN).Scan(&lsn); err != nil {
			return fmt.Errorf("wal position: %w", err)
		}
		start := time.Now()
		if _, err := fn(conn); err != nil {
			return err
		}
		*seconds = time.Since(start).Seconds()
		return conn.QueryRow(ctx, walBytesSince, lsn).Scan(wal)
	})
}
