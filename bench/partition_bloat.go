package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/migrations"
)

// partitionBloat simulates bloatWindowDays + bloatSteadyDays days of an
// outbox with a bloatWindowDays-day window, one day's rows (the drain's
// rows per day) a day, swept once a simulated day: partitioned (the
// kernel drops each day whole) and unpartitioned (the kernel's batches,
// then VACUUM: autovacuum keeping up, the row delete's best case). The
// simulated clock moves by the policy's window: on simulated day d the
// cutoff is bloatWindowDays before that day.
func (r *runner) partitionBloat(ctx context.Context) (PartitionBloat, error) {
	perDay := max(1, drainOldRows(r.cfg.DrainRows)/24)
	days := bloatWindowDays + bloatSteadyDays
	out := PartitionBloat{RowsPerDay: perDay, WindowDays: bloatWindowDays, SteadyDays: bloatSteadyDays}
	for _, partitioned := range []bool{true, false} {
		name := r.srv.name(fmt.Sprintf("partition_bloat_%t", partitioned))
		u, err := r.srv.create(ctx, name, "")
		if err != nil {
			return out, err
		}
		defer r.discard(name)
		if err := migrateDB(ctx, u, []migrations.Set{migrations.Transport()}); err != nil {
			return out, err
		}
		err = withConn(ctx, u, func(conn *pgx.Conn) error {
			size, live, err := r.simulateDays(ctx, conn, partitioned, perDay, days)
			if partitioned {
				out.PartitionedBytes, out.PartitionedLiveRows = size, live
			} else {
				out.RowDeletedBytes, out.RowDeletedLiveRows = size, live
			}
			return err
		})
		if err != nil {
			return out, fmt.Errorf("partitioned=%t: %w", partitioned, err)
		}
	}
	if out.PartitionedBytes > 0 {
		out.SizeRatio = round3(float64(out.RowDeletedBytes) / float64(out.PartitionedBytes))
	}
	r.cfg.logf("partition bloat: after %d steady days, partitioned %d MiB (%d rows), row-deleted %d MiB (%d rows): %.2fx",
		bloatSteadyDays, out.PartitionedBytes>>20, out.PartitionedLiveRows, out.RowDeletedBytes>>20, out.RowDeletedLiveRows, out.SizeRatio)
	return out, nil
}

// simulateDays inserts a day of rows per simulated day (day 0 is days ago)
// and sweeps after each, returning the table's size and rows at the end.
func (r *runner) simulateDays(ctx context.Context, conn *pgx.Conn, partitioned bool, perDay, days int) (size, live int64, err error) {
	if _, err := conn.Exec(ctx, seedBloatDay, perDay, days); err != nil {
		return 0, 0, err
	}
	if partitioned {
		if err := convertOutbox(ctx, conn); err != nil {
			return 0, 0, err
		}
	}
	p := r.outbox
	for d := 1; d <= days; d++ {
		if _, err := conn.Exec(ctx, seedBloatDay, perDay, days-d); err != nil {
			return 0, 0, err
		}
		// Simulated now is the end of day d: the real window that puts
		// the cutoff bloatWindowDays before it.
		p.WindowDays = days - d + bloatWindowDays
		for {
			rep, err := prune.PruneTable(ctx, conn, p)
			if err != nil {
				return 0, 0, err
			}
			if !rep.Capped {
				break
			}
		}
		if !partitioned {
			if _, err := conn.Exec(ctx, "VACUUM event_outbox"); err != nil {
				return 0, 0, err
			}
		}
	}
	if err := conn.QueryRow(ctx, outboxBytes).Scan(&size); err != nil {
		return 0, 0, err
	}
	err = conn.QueryRow(ctx, "SELECT count(*) FROM event_outbox").Scan(&live)
	return size, live, err
}
