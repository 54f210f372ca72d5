package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// partmanRun is what pg_partman's own retention did on one copy.
type partmanRun struct {
	rows        int64
	dropped     int
	pendingLost int64
	seconds     float64 // run_maintenance alone
}

// partmanRetire runs pg_partman's own retention on the daily layout: the
// configuration's retention set to the window (dropping, not keeping, the
// tables), then run_maintenance for the table, as a cron job would: one
// blind drop of every partition older than the window, whatever its rows.
// The rows, partitions and pending rows it removed are counted before and
// after; only run_maintenance is timed.
func partmanRetire(ctx context.Context, conn *pgx.Conn, windowDays int) (partmanRun, error) {
	var run partmanRun
	var rows, pending, parts [2]int64
	count := func(i int) error {
		return conn.QueryRow(ctx, partmanCounts).Scan(&rows[i], &pending[i], &parts[i])
	}
	if err := count(0); err != nil {
		return run, fmt.Errorf("count before: %w", err)
	}
	if _, err := conn.Exec(ctx, partmanRetention, strconv.Itoa(windowDays)+" days"); err != nil {
		return run, fmt.Errorf("pg_partman retention: %w", err)
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, partmanMaintenance); err != nil {
		return run, fmt.Errorf("pg_partman run_maintenance: %w", err)
	}
	run.seconds = time.Since(start).Seconds()
	if err := count(1); err != nil {
		return run, fmt.Errorf("count after: %w", err)
	}
	run.rows, run.pendingLost, run.dropped = rows[0]-rows[1], pending[0]-pending[1], int(parts[0]-parts[1])
	return run, nil
}

// partmanFigures are the pg_partman comparison's medians: the kernel's
// time ÷ pg_partman's on the clean layout, pg_partman's ms per partition,
// and the pending rows it dropped in the stuck layout.
func partmanFigures(runs []PartitionRun) (ratio, msPer float64, pendingLost int64) {
	var ratios, per []float64
	for _, run := range runs {
		switch {
		case run.Layout == layoutClean && run.PartmanSeconds > 0:
			ratios = append(ratios, run.KernelSeconds/run.PartmanSeconds)
			if run.PartmanDropped > 0 {
				per = append(per, 1000*run.PartmanSeconds/float64(run.PartmanDropped))
			}
		case run.Layout == layoutStuck:
			pendingLost = max(pendingLost, run.PartmanPendingLost)
		}
	}
	return round3(median(ratios)), round3(median(per)), pendingLost
}

// The volumes of the partition scenario: old daily partitions of 200,000
// and 1,000,000 rows (a service writing 2 and 12 events a second), four and
// three of them (the smoke run: 2,000 and 10,000 rows, two of each).
func partitionVolumeSizes(cfg Config) [][2]int {
	if cfg.Smoke {
		return [][2]int{{2_000, 2}, {10_000, 2}}
	}
	return [][2]int{{200_000, 4}, {1_000_000, 3}}
}

// partitionVolumes runs the clean layout at each volume: min(Rounds, 3)
// rounds of the kernel, the unbounded DELETE and pg_partman, order
// rotating.
func (r *runner) partitionVolumes(ctx context.Context) ([]PartitionVolume, error) {
	var out []PartitionVolume
	for _, size := range partitionVolumeSizes(r.cfg) {
		perPart, days := size[0], size[1]
		layout := "volume_" + strconv.Itoa(perPart)
		plain, daily, err := r.partitionTemplates(ctx, layout, seedVolumeOutbox, perPart, days)
		if err == nil {
			var v PartitionVolume
			v, err = r.partitionVolume(ctx, plain, daily, perPart, days)
			out = append(out, v)
		}
		r.discard(plain)
		r.discard(daily)
		if err != nil {
			return out, fmt.Errorf("%d rows a partition: %w", perPart, err)
		}
	}
	return out, nil
}

func (r *runner) partitionVolume(ctx context.Context, plain, daily string, perPart, days int) (PartitionVolume, error) {
	v := PartitionVolume{RowsPerPartition: perPart, Partitions: days, Rounds: min(r.cfg.Rounds, 3)}
	var kernel, deletes, partman, ratios, partmanRatios []float64
	for round := range v.Rounds {
		run, err := r.partitionRound(ctx, plain, daily, round)
		if err != nil {
			return v, fmt.Errorf("round %d: %w", round+1, err)
		}
		if want := int64(perPart) * int64(days); run.KernelRows != want || run.PartmanRows != want {
			return v, fmt.Errorf("round %d: the kernel retired %d rows, pg_partman %d, want %d", round+1, run.KernelRows, run.PartmanRows, want)
		}
		kernel, deletes, partman = append(kernel, run.KernelSeconds), append(deletes, run.DeleteSeconds), append(partman, run.PartmanSeconds)
		ratios, partmanRatios = append(ratios, run.Ratio), append(partmanRatios, run.KernelSeconds/run.PartmanSeconds)
		r.cfg.logf("partition volume %d rows x %d round %d/%d: kernel %.3f s, pg_partman %.3f s, unbounded DELETE %.3f s: ratio %.1f, vs pg_partman %.2f",
			perPart, days, round+1, v.Rounds, run.KernelSeconds, run.PartmanSeconds, run.DeleteSeconds, run.Ratio, run.KernelSeconds/run.PartmanSeconds)
	}
	v.KernelSeconds, v.DeleteSeconds, v.PartmanSeconds = round3(median(kernel)), round3(median(deletes)), round3(median(partman))
	v.Ratio, v.PartmanRatio = round3(median(ratios)), round3(median(partmanRatios))
	v.MSPerPartition = round3(1000 * v.KernelSeconds / float64(days))
	return v, nil
}

// Kernel-free SQL of the pg_partman comparison.
const (
	partmanCounts = `SELECT (SELECT count(*) FROM event_outbox), (SELECT count(*) FROM event_outbox WHERE published_at IS NULL),
       (SELECT count(*) FROM pg_inherits WHERE inhparent = 'event_outbox'::regclass)`
	partmanRetention = `UPDATE partman.part_config SET retention = $1, retention_keep_table = false, retention_keep_index = false
WHERE parent_table = 'public.event_outbox'`
	partmanMaintenance = `SELECT partman.run_maintenance('public.event_outbox', p_jobmon := false)`
)

// seedVolumeOutbox inserts $2 old days of $1 published outbox rows each,
// spread evenly over whole UTC days ending 32 days ago (every partition of
// them older than the 30-day window, each holding exactly $1 rows), and
// 1,000 young rows over the last day. $3 is the layout's pending-day
// divisor, unused here (every old row is published).
const seedVolumeOutbox = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
SELECT 'case.placement_changed', ` + outboxPayload + `, c.at, c.at + interval '2 seconds'
FROM generate_series(0, $1::int * $2::int - 1 + 1000 + 0 * $3::int) AS g,
LATERAL (SELECT CASE WHEN g < $1::int * $2::int
                     THEN date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - make_interval(days => 32 + $2::int)
                          + (g / $1::int) * interval '1 day' + (g % $1::int) * (interval '1 day' / $1::int)
                     ELSE now() - interval '1 day' + (g - $1::int * $2::int) * (interval '1 day' / 1000)
                END AS at) AS c`
