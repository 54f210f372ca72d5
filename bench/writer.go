package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/craig/retention/kernel/outbox"
)

// Writer configurations.
const (
	cfgAlone     = "without_sweep"
	cfgWithDrain = "with_drain"
	// cfgCPULoad: a backend spinning on the CPU (no I/O) for the window,
	// the load of one core a drain's backend takes: the floor a 2-core
	// machine sets on the writer, whatever the sweep does.
	cfgCPULoad = "with_cpu_load"
	// cfgHourly: one hourly cycle's worth of rows deleted mid-window, the
	// steady state of a service whose sweep keeps up.
	cfgHourly = "with_hourly_cycle"
)

// writerConfigs are measured every round, in rotating order.
var writerConfigs = []string{cfgAlone, cfgWithDrain, cfgCPULoad, cfgHourly}

// writerCurve are the yield batch sizes of the drain-rate vs writer-p99
// curve; 0 is "no yield" (full batches whatever the writers do). The
// kernel's default is a hundredth of the batch size (50 of 5,000; a
// twentieth, 250, until the writer curve moved the default).
var writerCurve = []int{10, 50, 250, 1000, 0}

const (
	// writerWarmup runs the writer before the measured window opens.
	writerWarmup = 500 * time.Millisecond
	// writerEventType is what the benchmark's writer stages.
	writerEventType = "bench.case_updated"
	// writerConns is how many connections share the writer's rate (one
	// connection commits serially: ~600 commits/s here at best).
	writerConns = 2
	// MaxWriterWindows bounds the windows a configuration repeats in a round to
	// reach WriterMinSamples.
	MaxWriterWindows = 20
)

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

// writerPools are a scenario's pooled latencies per configuration (and per
// curve point, keyed curveKey).
type writerPools map[string][]time.Duration

func curveKey(yieldBatch int) string { return "curve_yield_" + strconv.Itoa(yieldBatch) }

// runWriter measures the writer in each configuration, Rounds interleaved
// rounds of at least WriterMinSamples samples each, then the curve (its
// points in min(Rounds, 3) rounds), on fresh copies of the drain template.
func (r *runner) runWriter(ctx context.Context) (*WriterResult, error) {
	if r.drainTemplate == "" {
		r.cfg.logf("writer: seeding a %d-row event_outbox template", r.cfg.DrainRows)
		tpl, eligible, err := r.buildDrainTemplate(ctx)
		if err != nil {
			return nil, err
		}
		r.drainTemplate, r.drainEligible = tpl, eligible
	}
	res := &WriterResult{RatePerSec: r.cfg.WriterRate, Connections: writerConns, MinSamples: r.cfg.WriterMinSamples}
	pools := writerPools{}
	byRound := map[string][][]time.Duration{}
	for round := range r.cfg.Rounds {
		for i := range writerConfigs {
			name := writerConfigs[(i+round)%len(writerConfigs)]
			run, lat, err := r.writerRound(ctx, name, -1, round, r.cfg.Rounds)
			if err != nil {
				return nil, fmt.Errorf("writer %s round %d: %w", name, round+1, err)
			}
			run.Order = i + 1
			pools[name] = append(pools[name], lat...)
			byRound[name] = append(byRound[name], lat)
			res.Runs = append(res.Runs, run)
		}
	}
	for round := range min(r.cfg.Rounds, 3) {
		for i := range writerCurve {
			yb := writerCurve[(i+round)%len(writerCurve)]
			run, lat, err := r.writerRound(ctx, cfgWithDrain, yb, round, min(r.cfg.Rounds, 3))
			if err != nil {
				return nil, fmt.Errorf("writer curve yield %d round %d: %w", yb, round+1, err)
			}
			pools[curveKey(yb)] = append(pools[curveKey(yb)], lat...)
			res.Runs = append(res.Runs, run)
		}
	}
	res.summarize(pools)
	res.VsFloor, res.VsFloorCI = floorRatio(byRound[cfgWithDrain], byRound[cfgCPULoad])
	return res, nil
}

// writerRound collects at least WriterMinSamples samples of one
// configuration (yieldBatch ≥ 0: a curve point's drain) in one round,
// repeating its window on fresh copies as needed.
func (r *runner) writerRound(ctx context.Context, name string, yieldBatch, round, rounds int) (WriterRun, []time.Duration, error) {
	run := WriterRun{Config: name, Round: round + 1, YieldBatch: yieldBatch}
	var lat []time.Duration
	for w := 0; len(lat) < r.cfg.WriterMinSamples && w < MaxWriterWindows; w++ {
		l, win, err := r.writerWindow(ctx, name, yieldBatch, round, w, &run)
		if err != nil {
			return run, nil, err
		}
		lat = append(lat, l...)
		run.WindowS += win.Seconds()
		run.Windows++
	}
	run.Samples = len(lat)
	run.P50MS, run.P99MS, run.MaxMS = percentile(lat, 50), percentile(lat, 99), ms(maxDuration(lat))
	if run.WindowS > 0 && run.Deleted > 0 {
		run.DrainRowsPerSec = float64(run.Deleted) / run.WindowS
	}
	label := name
	if yieldBatch >= 0 {
		label = curveKey(yieldBatch)
	}
	r.cfg.logf("writer round %d/%d %-20s %6d samples in %d window(s) p50 %6.2f ms p99 %7.2f ms max %7.2f ms (drain batches %d, yielded %d, %.0f rows/s)",
		round+1, rounds, label, run.Samples, run.Windows, run.P50MS, run.P99MS, run.MaxMS, run.Batches, run.Yielded, run.DrainRowsPerSec)
	return run, lat, nil
}

// aloneWindow is how long a window without a drain lasts: long enough for
// WriterMinSamples at the rate (and a second more).
func (r *runner) aloneWindow() time.Duration {
	return time.Duration(float64(r.cfg.WriterMinSamples)/float64(r.cfg.WriterRate)*float64(time.Second)) + time.Second
}

// writerWindow runs the writer beside the configuration's load on a fresh
// copy of the drain template.
func (r *runner) writerWindow(ctx context.Context, name string, yieldBatch, round, w int, run *WriterRun) ([]time.Duration, time.Duration, error) {
	label := fmt.Sprintf("w%d_%s", w, name)
	if yieldBatch >= 0 {
		label = fmt.Sprintf("w%d_y%d", w, yieldBatch)
	}
	return r.writerBeside(ctx, r.drainTemplate, label, round, r.cfg.WriterRate, writerConns, func(ctx context.Context, conn *pgx.Conn) error {
		return r.writerLoad(ctx, conn, name, yieldBatch, run)
	})
}

// writerBeside runs the writer (rate events/s over conns connections) on a
// fresh copy of template while during runs on another connection, after
// the writer's warm-up, and returns the latencies of the events due
// meanwhile and the window's length.
func (r *runner) writerBeside(ctx context.Context, template, label string, round, rate, conns int,
	during func(context.Context, *pgx.Conn) error) ([]time.Duration, time.Duration, error) {
	db, err := r.srv.copyOf(ctx, template, label, round)
	if err != nil {
		return nil, 0, err
	}
	defer r.discard(db.name)
	var lat []time.Duration
	var span time.Duration
	err = withConn(ctx, db.url, func(lconn *pgx.Conn) error {
		wconns, closeAll, err := openWriters(ctx, db.url, conns)
		if err != nil {
			return err
		}
		defer closeAll()
		stop := make(chan struct{})
		results := make(chan writerResult, len(wconns))
		for _, c := range wconns {
			go func() {
				s, err := writer(ctx, c, max(1, rate/conns), stop)
				results <- writerResult{s, err}
			}()
		}
		select {
		case <-time.After(writerWarmup):
		case <-ctx.Done():
		}
		from := time.Now()
		lerr := during(ctx, lconn)
		to := time.Now()
		close(stop)
		var samples []sample
		errs := []error{lerr}
		for range wconns {
			wr := <-results
			samples, errs = append(samples, wr.s...), append(errs, wr.err)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("writer beside %s: %w", label, err)
		}
		lat, span = window(samples, from, to), to.Sub(from)
		return nil
	})
	return lat, span, err
}

type writerResult struct {
	s   []sample
	err error
}

// openWriters opens the writer's n connections.
func openWriters(ctx context.Context, url string, n int) ([]*pgx.Conn, func(), error) {
	var conns []*pgx.Conn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close(context.Background())
		}
	}
	for range n {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, c)
	}
	return conns, closeAll, nil
}

// cpuSpin keeps one backend busy on the CPU alone (no I/O) until its
// statement_timeout (set by the caller) cancels it.
const cpuSpin = `DO $$ DECLARE i bigint := 0; BEGIN LOOP i := i + 1; END LOOP; END $$`

// writerLoad is the window's load on conn: none (a wait), the kernel's
// drain (at yieldBatch when ≥ 0), a CPU-only backend, or one hourly cycle.
func (r *runner) writerLoad(ctx context.Context, conn *pgx.Conn, name string, yieldBatch int, run *WriterRun) error {
	window := r.aloneWindow()
	switch name {
	case cfgWithDrain:
		p := r.outbox
		if yieldBatch > 0 {
			p.YieldBatchSize = yieldBatch
		} else if yieldBatch == 0 {
			p.YieldToWriters = false
		}
		_, rep, err := r.kernelDrainWith(ctx, conn, p)
		run.Deleted, run.Batches, run.Yielded = run.Deleted+rep.Deleted, run.Batches+rep.Batches, run.Yielded+rep.Yielded
		return err
	case cfgCPULoad:
		if _, err := conn.Exec(ctx, "SELECT set_config('statement_timeout', $1, false)", strconv.FormatInt(window.Milliseconds(), 10)); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, cpuSpin)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "57014" {
			return nil // the window's end
		}
		return fmt.Errorf("cpu load: ended before its window: %w", err)
	case cfgHourly:
		if err := sleepFor(ctx, window/2); err != nil {
			return err
		}
		// An hour of this backlog's rows (24 days of them), in one cycle
		// whose batch is the hour.
		p := r.outbox
		hour := max(1, drainOldRows(r.cfg.DrainRows)/(24*24))
		p.BatchSize, p.CycleCap = hour, int64(hour)
		rep, err := pruneOnce(ctx, conn, p)
		if err != nil {
			return err
		}
		run.Deleted, run.Batches, run.Yielded = run.Deleted+rep.Deleted, run.Batches+rep.Batches, run.Yielded+rep.Yielded
		return sleepFor(ctx, window-window/2)
	default:
		return sleepFor(ctx, window)
	}
}

func sleepFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
