package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5"
)

// The drain configurations, in the order the first round runs them.
const (
	cfgKernel         = "kernel"
	cfgUnbounded      = "unbounded_delete"
	cfgUnboundedIndex = "unbounded_delete_index_plan"
	cfgRiver          = "river"
	cfgOldestFirst    = "oldest_first_no_index"
)

var drainConfigs = []string{cfgKernel, cfgUnbounded, cfgUnboundedIndex, cfgRiver, cfgOldestFirst}

// The ceiling of a round is the faster of the two unbounded DELETEs: as the
// planner plans it, and with the sweep index's plan forced (the planner may
// prefer a sequential scan that is slower, which would flatter every ratio).
var ceilingConfigs = []string{cfgUnbounded, cfgUnboundedIndex}

var drainLabels = map[string]string{
	cfgKernel:         "kernel `prune.PruneTable`, real outbox policy",
	cfgUnbounded:      "one unbounded `DELETE`, the planner's plan",
	cfgUnboundedIndex: "one unbounded `DELETE`, index plan forced",
	cfgRiver:          "River-style `id IN (SELECT id … LIMIT %d)`",
	cfgOldestFirst:    "oldest-first `ORDER BY created_at LIMIT 1000`, no index (time-boxed %s, extrapolated)",
}

// drainOldRows is how many rows of n the drain seed makes old, so that 45%
// of the table is eligible (every 46th old row stays pending): 46%, in
// integers (exactly 45% eligible when n is a multiple of 100).
func drainOldRows(n int) int { return (n*46 + 99) / 100 }

// buildDrainTemplate seeds the drain scenario's template: the transport
// tables and a DrainRows-row outbox, vacuumed (frozen, analyzed).
func (r *runner) buildDrainTemplate(ctx context.Context) (string, int64, error) {
	name := r.srv.name("drain")
	var eligible int64
	err := r.buildTemplate(ctx, name, []migrations.Set{migrations.Transport()}, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, seedDrainOutbox, r.cfg.DrainRows, drainOldRows(r.cfg.DrainRows)); err != nil {
			return fmt.Errorf("seed event_outbox: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	err = withConn(ctx, r.mustURL(name), func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, countEligibleOutbox, r.outbox.WindowDays).Scan(&eligible)
	})
	return name, eligible, err
}

// runDrain measures every drain configuration in Rounds interleaved rounds.
func (r *runner) runDrain(ctx context.Context) (*DrainResult, error) {
	r.cfg.logf("drain: seeding a %d-row event_outbox template", r.cfg.DrainRows)
	tpl, eligible, err := r.buildDrainTemplate(ctx)
	if err != nil {
		return nil, err
	}
	r.drainTemplate, r.drainEligible = tpl, eligible
	res := &DrainResult{Rows: r.cfg.DrainRows, Eligible: eligible}
	for round := range r.cfg.Rounds {
		for i := range drainConfigs {
			name := drainConfigs[(i+round)%len(drainConfigs)]
			run, err := r.drainOnce(ctx, tpl, name, round)
			if err != nil {
				return nil, fmt.Errorf("drain %s round %d: %w", name, round+1, err)
			}
			run.Order = i + 1
			if !run.TimeBoxed && run.Deleted != eligible {
				return nil, fmt.Errorf("drain %s round %d: deleted %d rows, %d were eligible", name, round+1, run.Deleted, eligible)
			}
			r.cfg.logf("drain round %d/%d %-22s %9d rows %8.0f rows/s worst batch %7.1f ms, %d batches, %.0f WAL B/row",
				round+1, r.cfg.Rounds, name, run.Deleted, run.RowsPerSec, run.WorstBatchMS, run.Batches, perRow(run.WALBytes, run.Deleted))
			res.Runs = append(res.Runs, run)
		}
	}
	var worstMax float64
	var yieldedMax int
	for _, name := range drainConfigs {
		c, worst, yielded := r.drainConfig(res, name)
		worstMax, yieldedMax = max(worstMax, worst), max(yieldedMax, yielded)
		res.Configs = append(res.Configs, c)
	}
	res.Kernel = KernelDrainNote{
		BatchSize: int(r.outboxBatch()), CycleCap: r.outbox.CycleCap,
		StatementTimeoutMS: r.outbox.StatementTimeout.Milliseconds(), LockTimeoutMS: r.outbox.LockTimeout.Milliseconds(),
		WorstBatchMaxMS: worstMax, YieldedMax: yieldedMax,
	}
	return res, nil
}

// drainConfig is one configuration's medians over the rounds, and (for the
// kernel) its worst batch and most yielded batches of any round.
func (r *runner) drainConfig(res *DrainResult, name string) (c DrainConfig, worstMax float64, yieldedMax int) {
	var rates, ratios, worst, wal, batches []float64
	var deleted int64
	boxed := false
	for _, run := range res.Runs {
		if run.Config != name {
			continue
		}
		rates = append(rates, run.RowsPerSec)
		worst = append(worst, run.WorstBatchMS)
		wal = append(wal, perRow(run.WALBytes, run.Deleted))
		batches = append(batches, float64(run.Batches))
		deleted = run.Deleted
		boxed = boxed || run.TimeBoxed
		if ceil := ceilingRate(res.Runs, run.Round); ceil > 0 {
			ratios = append(ratios, run.RowsPerSec/ceil)
		}
		if name == cfgKernel {
			worstMax = max(worstMax, run.WorstBatchMS)
			yieldedMax = max(yieldedMax, run.Yielded)
		}
	}
	c = DrainConfig{
		Name: name, Label: r.drainLabel(name), RowsPerSec: median(rates), Ratio: round3(median(ratios)),
		WorstBatchMS: median(worst), WALPerRow: median(wal), Batches: int(median(batches)), Deleted: deleted, TimeBoxed: boxed,
	}
	if boxed && c.RowsPerSec > 0 {
		c.ExtrapolatedSeconds = float64(res.Eligible) / c.RowsPerSec
	}
	return c, worstMax, yieldedMax
}

func (r *runner) drainLabel(name string) string {
	switch name {
	case cfgRiver:
		return fmt.Sprintf(drainLabels[name], r.outboxBatch())
	case cfgOldestFirst:
		return fmt.Sprintf(drainLabels[name], r.cfg.TimeBox)
	}
	return drainLabels[name]
}

// ceilingRate is a round's ceiling: the faster unbounded DELETE's rows/s.
func ceilingRate(runs []DrainRun, round int) float64 {
	var best float64
	for _, r := range runs {
		if r.Round == round && slices.Contains(ceilingConfigs, r.Config) {
			best = max(best, r.RowsPerSec)
		}
	}
	return best
}

func perRow(bytes, rows int64) float64 {
	if rows == 0 {
		return 0
	}
	return float64(bytes) / float64(rows)
}

// drainOnce runs one configuration on a fresh copy of the template.
func (r *runner) drainOnce(ctx context.Context, tpl, name string, round int) (DrainRun, error) {
	run := DrainRun{Config: name, Round: round + 1}
	db, err := r.srv.copyOf(ctx, tpl, name, round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	err = withConn(ctx, db.url, func(conn *pgx.Conn) error {
		if name == cfgOldestFirst {
			if _, err := conn.Exec(ctx, dropIndexForOldestFirst); err != nil {
				return fmt.Errorf("drop the sweep index: %w", err)
			}
		}
		var lsn string
		if err := conn.QueryRow(ctx, walInsertLSN).Scan(&lsn); err != nil {
			return fmt.Errorf("wal position: %w", err)
		}
		start := time.Now()
		batches, err := r.drainBy(ctx, conn, name, &run, &start)
		if err != nil {
			return err
		}
		elapsed := time.Since(start)
		if err := conn.QueryRow(ctx, walBytesSince, lsn).Scan(&run.WALBytes); err != nil {
			return fmt.Errorf("wal bytes: %w", err)
		}
		run.Seconds = elapsed.Seconds()
		run.RowsPerSec = float64(run.Deleted) / elapsed.Seconds()
		if run.Batches == 0 {
			run.Batches = len(batches)
		}
		run.WorstBatchMS = ms(maxDuration(batches))
		return nil
	})
	return run, err
}

// drainBy drains the backlog the way configuration name does, filling
// run's counts; start is reset when a configuration's set-up must not count
// (forcing the index plan).
func (r *runner) drainBy(ctx context.Context, conn *pgx.Conn, name string, run *DrainRun, start *time.Time) ([]time.Duration, error) {
	var batches []time.Duration
	var err error
	switch name {
	case cfgKernel:
		d, rep, err := r.kernelDrain(ctx, conn)
		if err != nil {
			return nil, err
		}
		batches, run.Deleted, run.Batches, run.Yielded = d, rep.Deleted, rep.Batches, rep.Yielded
	case cfgUnbounded, cfgUnboundedIndex:
		if name == cfgUnboundedIndex {
			for _, stmt := range forceIndexPlan {
				if _, err := conn.Exec(ctx, stmt); err != nil {
					return nil, fmt.Errorf("force the index plan: %w", err)
				}
			}
			*start = time.Now()
		}
		tag, err := conn.Exec(ctx, deleteUnbounded, r.outbox.WindowDays)
		if err != nil {
			return nil, fmt.Errorf("unbounded delete: %w", err)
		}
		batches, run.Deleted = []time.Duration{time.Since(*start)}, tag.RowsAffected()
	case cfgRiver:
		batches, run.Deleted, _, err = batchLoop(ctx, conn, deleteRiverBatch, r.outbox.WindowDays, r.outboxBatch(), 0)
	case cfgOldestFirst:
		batches, run.Deleted, run.TimeBoxed, err = batchLoop(ctx, conn, deleteOldestFirstBatch, r.outbox.WindowDays, oldestFirstBatch, r.cfg.TimeBox)
	default:
		return nil, fmt.Errorf("unknown drain configuration %q", name)
	}
	return batches, err
}

// kernelDrain runs the kernel's PruneTable with the real outbox policy on
// conn (as the sweeper does, on its lease's connection), timing each batch.
// A backlog above the cycle cap takes more than one call, as it would take
// more than one cycle; the calls follow each other at once.
func (r *runner) kernelDrain(ctx context.Context, conn *pgx.Conn) ([]time.Duration, prune.Report, error) {
	return r.kernelDrainWith(ctx, conn, r.outbox)
}

// kernelDrainWith is kernelDrain with policy p.
func (r *runner) kernelDrainWith(ctx context.Context, conn *pgx.Conn, p prune.Policy) ([]time.Duration, prune.Report, error) {
	timer := &batchTimer{DB: conn}
	var total prune.Report
	for {
		rep, err := prune.PruneTable(ctx, timer, p)
		total.Deleted += rep.Deleted
		total.Batches += rep.Batches
		total.Yielded += rep.Yielded
		if err != nil {
			return nil, total, fmt.Errorf("kernel prune: %w", err)
		}
		if !rep.Capped {
			return timer.durations(), total, nil
		}
	}
}

// batchLoop runs a peer's batch delete (window $1, limit $2, autocommit)
// until a short batch, or until timeBox (when non-zero) has passed between
// batches.
func batchLoop(ctx context.Context, conn *pgx.Conn, stmt string, window int, limit int64, timeBox time.Duration) (batches []time.Duration, deleted int64, boxed bool, err error) {
	start := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return batches, deleted, false, err
		}
		if timeBox > 0 && time.Since(start) >= timeBox {
			return batches, deleted, true, nil
		}
		bs := time.Now()
		tag, err := conn.Exec(ctx, stmt, window, limit)
		if err != nil {
			return batches, deleted, false, fmt.Errorf("batch %d: %w", len(batches)+1, err)
		}
		batches = append(batches, time.Since(bs))
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < limit {
			return batches, deleted, false, nil
		}
	}
}

// pruneOnce is one PruneTable call of p on conn (one cycle).
func pruneOnce(ctx context.Context, conn *pgx.Conn, p prune.Policy) (prune.Report, error) {
	rep, err := prune.PruneTable(ctx, conn, p)
	if err != nil {
		return rep, fmt.Errorf("kernel prune: %w", err)
	}
	return rep, nil
}
