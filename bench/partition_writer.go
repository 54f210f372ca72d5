package bench

import (
	"context"
	"errors"
	"fmt"
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
	var beside, alone []time.Duration
	for round := range r.cfg.Rounds {
		var window time.Duration
		retire := func(ctx context.Context, kconn *pgx.Conn) error {
			start := time.Now()
			_, _, _, err := r.retireAll(ctx, kconn)
			window = time.Since(start)
			return err
		}
		lat, err := r.writerBeside(ctx, daily, "pw_retire", round, retire)
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
		if lat, err = r.writerBeside(ctx, daily, "pw_alone", round, wait); err != nil {
			return out, err
		}
		alone = append(alone, lat...)
		r.cfg.logf("partition writer round %d/%d: %d samples beside a %.0f ms retirement, %d alone", round+1, r.cfg.Rounds, len(beside), ms(window), len(alone))
	}
	out.SamplesRetiring, out.SamplesAlone = len(beside), len(alone)
	out.RetiringP50MS, out.RetiringP99MS = percentile(beside, 50), percentile(beside, 99)
	out.AloneP50MS, out.AloneP99MS = percentile(alone, 50), percentile(alone, 99)
	if out.AloneP99MS > 0 {
		out.P99Ratio = round3(out.RetiringP99MS / out.AloneP99MS)
	}
	return out, nil
}

// writerBeside runs the writer on a fresh copy of template while during
// runs on a second connection (after the writer's warm-up) and returns the
// latencies of the events due meanwhile.
func (r *runner) writerBeside(ctx context.Context, template, label string, round int, during func(context.Context, *pgx.Conn) error) ([]time.Duration, error) {
	db, err := r.srv.copyOf(ctx, template, label, round)
	if err != nil {
		return nil, err
	}
	defer r.discard(db.name)
	var lat []time.Duration
	err = withConn(ctx, db.url, func(wconn *pgx.Conn) error {
		return withConn(ctx, db.url, func(kconn *pgx.Conn) error {
			stop := make(chan struct{})
			type result struct {
				s   []sample
				err error
			}
			done := make(chan result, 1)
			go func() {
				s, err := writer(ctx, wconn, partitionWriterRate, stop)
				done <- result{s, err}
			}()
			select {
			case <-time.After(writerWarmup):
			case <-ctx.Done():
			}
			from := time.Now()
			derr := during(ctx, kconn)
			to := time.Now()
			close(stop)
			w := <-done
			if err := errors.Join(derr, w.err); err != nil {
				return fmt.Errorf("writer beside %s: %w", label, err)
			}
			lat = window(w.s, from, to)
			return nil
		})
	})
	return lat, err
}
