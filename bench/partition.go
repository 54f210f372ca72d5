package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/migrations"
)

// runPartition measures partition retirement (issue 15): the drain's
// volume (DrainRows, 46% old) laid out in daily partitions by pg_partman
// (the conversion operators run), the old rows' undelivered events on one
// day in eight; the kernel's PruneTable with the real outbox policy (whole
// partitions where no row must stay, batches elsewhere; as many calls as
// cycles would take) against one unbounded DELETE of the same rows on the
// unpartitioned copy, in Rounds interleaved rounds.
func (r *runner) runPartition(ctx context.Context) (*PartitionResult, error) {
	plain, daily := r.srv.name("partition_plain"), r.srv.name("partition_daily")
	seed := func(convert bool) func(*pgx.Conn) error {
		return func(conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, seedPartitionOutbox, r.cfg.DrainRows, drainOldRows(r.cfg.DrainRows)); err != nil {
				return fmt.Errorf("seed event_outbox: %w", err)
			}
			if !convert {
				return nil
			}
			return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, migrations.PartitionOutboxSQL())
				if err != nil {
					return fmt.Errorf("partition event_outbox (pg_partman: postgresql-<version>-partman): %w", err)
				}
				return nil
			})
		}
	}
	for _, t := range []struct {
		name    string
		convert bool
	}{{plain, false}, {daily, true}} {
		if err := r.buildTemplate(ctx, t.name, []migrations.Set{migrations.Transport()}, seed(t.convert)); err != nil {
			return nil, err
		}
	}
	defer r.discard(plain)
	defer r.discard(daily)
	res := &PartitionResult{Rows: r.cfg.DrainRows}
	var ratios, walPerRow []float64
	for round := range r.cfg.Rounds {
		run, err := r.partitionRound(ctx, plain, daily, round)
		if err != nil {
			return nil, fmt.Errorf("partition round %d: %w", round+1, err)
		}
		r.cfg.logf("partition round %d/%d: kernel %d rows in %.3f s (%d partitions dropped, %d kept), unbounded DELETE %d rows in %.3f s: ratio %.1f, %.2f WAL bytes/row",
			round+1, r.cfg.Rounds, run.KernelRows, run.KernelSeconds, run.Dropped, run.Kept, run.DeleteRows, run.DeleteSeconds, run.Ratio, run.KernelWALPerRow)
		res.Runs = append(res.Runs, run)
		ratios, walPerRow = append(ratios, run.Ratio), append(walPerRow, run.KernelWALPerRow)
	}
	res.Ratio, res.WALBytesPerRow = round3(median(ratios)), round3(median(walPerRow))
	return res, nil
}

// partitionRound times the kernel on a copy of the partitioned template and
// the unbounded DELETE on a copy of the plain one (order alternating).
func (r *runner) partitionRound(ctx context.Context, plain, daily string, round int) (PartitionRun, error) {
	run := PartitionRun{Round: round + 1}
	kernel := func() error {
		return r.onCopy(ctx, daily, "kernel", round, func(conn *pgx.Conn) (int64, error) {
			var dropped, kept int
			timer := &batchTimer{DB: conn}
			for {
				rep, err := prune.PruneTable(ctx, timer, r.outbox)
				if err != nil {
					return run.KernelRows, err
				}
				run.KernelRows += rep.Deleted
				dropped, kept = dropped+len(rep.Partitions.Dropped), kept+len(rep.Partitions.Kept)
				if !rep.Capped {
					run.Dropped, run.Kept = dropped, kept
					return run.KernelRows, nil
				}
			}
		}, &run.KernelSeconds, &run.KernelWAL)
	}
	unbounded := func() error {
		return r.onCopy(ctx, plain, "delete", round, func(conn *pgx.Conn) (int64, error) {
			tag, err := conn.Exec(ctx, deleteUnbounded, r.outbox.WindowDays)
			run.DeleteRows = tag.RowsAffected()
			return run.DeleteRows, err
		}, &run.DeleteSeconds, &run.DeleteWAL)
	}
	steps := []func() error{kernel, unbounded}
	if round%2 == 1 {
		steps = []func() error{unbounded, kernel}
	}
	for _, s := range steps {
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
