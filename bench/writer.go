package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/craig/retention/kernel/outbox"
	"github.com/jackc/pgx/v5"
)

// Writer configurations.
const (
	cfgWithDrain = "with_drain"
	cfgAlone     = "without_sweep"
)

// writerWarmup runs the writer before the measured window opens.
const writerWarmup = 500 * time.Millisecond

// writerEventType is what the benchmark's writer stages.
const writerEventType = "bench.case_updated"

// sample is one staged event: when it was due and how long after that its
// transaction committed (open loop: a late start counts against latency, so
// a stall is not hidden by the writer waiting it out).
type sample struct {
	due time.Time
	lat time.Duration
}

// writer stages one outbox event per transaction (outbox.Stage, as a service
// does) at a fixed rate on its own connection until stop is closed.
func writer(ctx context.Context, conn *pgx.Conn, rate int, stop <-chan struct{}) ([]sample, error) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var out []sample
	var stoppedAt time.Time
	for k := 0; ; k++ {
		due := start.Add(time.Duration(k) * interval)
		if stoppedAt.IsZero() {
			select {
			case <-stop:
				stoppedAt = time.Now()
			default:
			}
		}
		// Events due before stop are staged however late (a stall must not
		// hide the events it delayed); none due after it.
		if !stoppedAt.IsZero() && !due.Before(stoppedAt) {
			return out, nil
		}
		if wait := time.Until(due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-stop:
				t.Stop()
				return out, nil
			case <-ctx.Done():
				t.Stop()
				return out, ctx.Err()
			case <-t.C:
			}
		} else if err := ctx.Err(); err != nil {
			return out, err
		}
		payload := []byte(`{"case_id":"case-` + strconv.Itoa(k%100000) + `","seq":` + strconv.Itoa(k) + `,"county":"county-7","actor":"worker-3"}`)
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: writerEventType, Payload: payload})
			return err
		})
		if err != nil {
			return out, fmt.Errorf("writer: %w", err)
		}
		out = append(out, sample{due: due, lat: time.Since(due)})
	}
}

// window keeps the latencies of the samples due within [from, to).
func window(s []sample, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, x := range s {
		if !x.due.Before(from) && x.due.Before(to) {
			out = append(out, x.lat)
		}
	}
	return out
}

// runWriter measures the writer with a kernel drain running and with no
// sweep, in Rounds interleaved rounds, each on a fresh copy of the drain
// template.
func (r *runner) runWriter(ctx context.Context) (*WriterResult, error) {
	if r.drainTemplate == "" {
		r.cfg.logf("writer: seeding a %d-row event_outbox template", r.cfg.DrainRows)
		tpl, eligible, err := r.buildDrainTemplate(ctx)
		if err != nil {
			return nil, err
		}
		r.drainTemplate, r.drainEligible = tpl, eligible
	}
	res := &WriterResult{RatePerSec: r.cfg.WriterRate}
	// The writer-alone window matches the drains' (their median), so both
	// configurations collect about as many samples.
	var drainWindows []float64
	configs := []string{cfgWithDrain, cfgAlone}
	for round := range r.cfg.Rounds {
		for i := range configs {
			name := configs[(i+round)%len(configs)]
			alone := r.cfg.TimeBox
			if len(drainWindows) > 0 {
				alone = time.Duration(median(drainWindows) * float64(time.Second))
			} else if r.kernelDrainSeconds > 0 {
				alone = time.Duration(r.kernelDrainSeconds * float64(time.Second))
			}
			run, err := r.writerOnce(ctx, name, round, alone)
			if err != nil {
				return nil, fmt.Errorf("writer %s round %d: %w", name, round+1, err)
			}
			run.Order = i + 1
			if name == cfgWithDrain {
				drainWindows = append(drainWindows, run.WindowS)
			}
			r.cfg.logf("writer round %d/%d %-13s %5d samples p50 %6.2f ms p99 %7.2f ms max %7.2f ms over %.1f s (drain batches %d, yielded %d)",
				round+1, r.cfg.Rounds, name, run.Samples, run.P50MS, run.P99MS, run.MaxMS, run.WindowS, run.Batches, run.Yielded)
			res.Runs = append(res.Runs, run)
		}
	}
	res.summarize(drainWindows)
	return res, nil
}

// measureWindow waits out the writer's warm-up, then runs the window: the
// kernel's drain (cfgWithDrain, its counts into run) or a wait of alone.
// It returns when the window started.
func (r *runner) measureWindow(ctx context.Context, name string, dconn *pgx.Conn, alone time.Duration, run *WriterRun) (time.Time, error) {
	select {
	case <-time.After(writerWarmup):
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	from := time.Now()
	if name == cfgWithDrain {
		_, rep, err := r.kernelDrain(ctx, dconn)
		if err != nil {
			return from, err
		}
		run.Deleted, run.Batches, run.Yielded = rep.Deleted, rep.Batches, rep.Yielded
		return from, nil
	}
	select {
	case <-time.After(alone):
		return from, nil
	case <-ctx.Done():
		return from, ctx.Err()
	}
}

// summarize sets the medians, per-round ratios and pooled percentiles from
// the runs; drainWindows are the drains' windows.
func (res *WriterResult) summarize(drainWindows []float64) {
	var dp50, dp99, ap50, ap99, r50, r99, batches, yielded, rates []float64
	var pooledDrain, pooledAlone []time.Duration
	for _, run := range res.Runs {
		if run.Config == cfgWithDrain {
			pooledDrain = append(pooledDrain, run.lat...)
		} else {
			pooledAlone = append(pooledAlone, run.lat...)
		}
		if run.Config != cfgWithDrain {
			ap50, ap99 = append(ap50, run.P50MS), append(ap99, run.P99MS)
			continue
		}
		dp50, dp99 = append(dp50, run.P50MS), append(dp99, run.P99MS)
		batches, yielded = append(batches, float64(run.Batches)), append(yielded, float64(run.Yielded))
		if run.WindowS > 0 {
			rates = append(rates, float64(run.Deleted)/run.WindowS)
		}
		for _, other := range res.Runs {
			if other.Config == cfgAlone && other.Round == run.Round && other.P50MS > 0 && other.P99MS > 0 {
				r50, r99 = append(r50, run.P50MS/other.P50MS), append(r99, run.P99MS/other.P99MS)
			}
		}
	}
	res.WindowS = median(drainWindows)
	res.DrainP50MS, res.DrainP99MS, res.AloneP50MS, res.AloneP99MS = median(dp50), median(dp99), median(ap50), median(ap99)
	res.P50Ratio, res.P99Ratio = round3(median(r50)), round3(median(r99))
	res.DrainBatches, res.DrainYielded = int(median(batches)), int(median(yielded))
	res.DrainRowsPerSec = median(rates)
	res.PooledDrainP99MS, res.PooledAloneP99MS = percentile(pooledDrain, 99), percentile(pooledAlone, 99)
	if res.PooledAloneP99MS > 0 {
		res.PooledP99Ratio = round3(res.PooledDrainP99MS / res.PooledAloneP99MS)
	}
}

// writerOnce runs the writer on a fresh copy, with the kernel draining the
// backlog (the window is the drain) or alone for the given window.
func (r *runner) writerOnce(ctx context.Context, name string, round int, alone time.Duration) (WriterRun, error) {
	run := WriterRun{Config: name, Round: round + 1}
	db, err := r.srv.copyOf(ctx, r.drainTemplate, "w_"+name, round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	wconn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		return run, err
	}
	defer func() { _ = wconn.Close(context.Background()) }()
	var dconn *pgx.Conn
	if name == cfgWithDrain {
		if dconn, err = pgx.Connect(ctx, db.url); err != nil {
			return run, err
		}
		defer func() { _ = dconn.Close(context.Background()) }()
	}

	stop := make(chan struct{})
	type result struct {
		s   []sample
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := writer(ctx, wconn, r.cfg.WriterRate, stop)
		done <- result{s, err}
	}()
	stopWriter := func() result {
		close(stop)
		return <-done
	}
	from, err := r.measureWindow(ctx, name, dconn, alone, &run)
	if err != nil {
		stopWriter()
		return run, err
	}
	to := time.Now()
	w := stopWriter()
	if w.err != nil {
		return run, w.err
	}
	lat := window(w.s, from, to)
	run.Samples, run.WindowS, run.lat = len(lat), to.Sub(from).Seconds(), lat
	run.P50MS, run.P99MS, run.MaxMS = percentile(lat, 50), percentile(lat, 99), ms(maxDuration(lat))
	return run, nil
}
