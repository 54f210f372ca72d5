package bench

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// partitionWriter measures a writer staging events into today's partition
// while the kernel retires the clean layout's old partitions, against the
// same writer alone for the same time, on fresh copies of the partitioned
// template, in Rounds interleaved rounds; the ratio is of the pooled p99s.
func (r *runner) partitionWriter(ctx context.Context, daily string) (PartitionWriter, error) {
	var out PartitionWriter
	out.RatePerSec = partitionWriterRate
	var beside, alone, partman []time.Duration
	for round := range r.cfg.Rounds {
		var window time.Duration
		retire := func(ctx context.Context, kconn *pgx.Conn) error {
			start := time.Now()
			_, _, _, err := r.retireAll(ctx, kconn)
			window = time.Since(start)
			return err
		}
		lat, _, err := r.writerBeside(ctx, daily, "pw_retire", round, partitionWriterRate, 1, retire)
		if err != nil {
			return out, err
		}
		beside = append(beside, lat...)
		wait := func(ctx context.Context, _ *pgx.Conn) error {
			select {
			case <-time.After(window):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if lat, _, err = r.writerBeside(ctx, daily, "pw_alone", round, partitionWriterRate, 1, wait); err != nil {
			return out, err
		}
		alone = append(alone, lat...)
		dropBlind := func(ctx context.Context, conn *pgx.Conn) error {
			_, err := partmanRetire(ctx, conn, r.outbox.WindowDays)
			return err
		}
		if lat, _, err = r.writerBeside(ctx, daily, "pw_partman", round, partitionWriterRate, 1, dropBlind); err != nil {
			return out, err
		}
		partman = append(partman, lat...)
		r.cfg.logf("partition writer round %d/%d: %d samples beside a %.0f ms retirement, %d alone", round+1, r.cfg.Rounds, len(beside), ms(window), len(alone))
	}
	out.SamplesRetiring, out.SamplesAlone = len(beside), len(alone)
	out.RetiringP50MS, out.RetiringP99MS = percentile(beside, 50), percentile(beside, 99)
	out.AloneP50MS, out.AloneP99MS = percentile(alone, 50), percentile(alone, 99)
	out.SamplesPartman, out.PartmanP50MS, out.PartmanP99MS = len(partman), percentile(partman, 50), percentile(partman, 99)
	if out.AloneP99MS > 0 {
		out.P99Ratio = round3(out.RetiringP99MS / out.AloneP99MS)
		out.PartmanP99Ratio = round3(out.PartmanP99MS / out.AloneP99MS)
	}
	return out, nil
}
