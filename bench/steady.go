package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// idleCycles is how many cycles with nothing eligible each round times (the
// round's value is their median).
const idleCycles = 5

// runSteady measures one hourly cycle and cycles with nothing eligible on a
// SteadyRows-row outbox spanning the window + 1 h.
func (r *runner) runSteady(ctx context.Context) (*SteadyResult, error) {
	r.cfg.logf("steady: seeding a %d-row event_outbox template spanning %d days + 1 h", r.cfg.SteadyRows, r.outbox.WindowDays)
	tpl := r.srv.name("steady")
	err := r.buildTemplate(ctx, tpl, []migrations.Set{migrations.Transport()}, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, seedSteadyOutbox, r.cfg.SteadyRows, r.outbox.WindowDays); err != nil {
			return fmt.Errorf("seed event_outbox: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := &SteadyResult{Rows: r.cfg.SteadyRows}
	for round := range r.cfg.Rounds {
		run, err := r.steadyOnce(ctx, tpl, round)
		if err != nil {
			return nil, fmt.Errorf("steady round %d: %w", round+1, err)
		}
		r.cfg.logf("steady round %d/%d hourly cycle %7.1f ms (%d rows), idle cycle %6.1f ms, after VACUUM %6.1f ms, with a new connection %6.1f ms",
			round+1, r.cfg.Rounds, run.HourlyCycleMS, run.HourlyDeleted, run.IdleCycleMS, run.IdleVacuumedCycleMS, run.IdleColdCycleMS)
		res.Runs = append(res.Runs, run)
	}
	var hourly, deleted, idle, vac, cold []float64
	for _, run := range res.Runs {
		hourly, deleted = append(hourly, run.HourlyCycleMS), append(deleted, float64(run.HourlyDeleted))
		idle, vac, cold = append(idle, run.IdleCycleMS), append(vac, run.IdleVacuumedCycleMS), append(cold, run.IdleColdCycleMS)
	}
	res.HourlyCycleMS, res.HourlyDeleted = median(hourly), int64(median(deleted))
	res.IdleCycleMS, res.IdleVacuumedCycleMS, res.IdleColdCycleMS = median(idle), median(vac), median(cold)
	return res, nil
}

// steadyOnce runs, on a fresh copy, the real sweep cycle (Sweeper.RunOnce
// over the service's groups: lease, outbox, backlog gauge, inbox) once with
// the hour eligible, then idleCycles times with nothing eligible, then
// idleCycles times again after VACUUM, then idleCycles times with no idle
// connection in the pool.
func (r *runner) steadyOnce(ctx context.Context, tpl string, round int) (SteadyRun, error) {
	run := SteadyRun{Round: round + 1}
	db, err := r.srv.copyOf(ctx, tpl, "cycle", round)
	if err != nil {
		return run, err
	}
	defer r.discard(db.name)
	pool, err := pgsession.NewPool(ctx, db.url)
	if err != nil {
		return run, err
	}
	defer pool.Close()
	m, err := metrics.NewPrune(prometheus.NewRegistry())
	if err != nil {
		return run, err
	}
	s, err := sweep.New(pool, r.groups, slog.New(slog.NewTextHandler(io.Discard, nil)), m)
	if err != nil {
		return run, err
	}
	c := &steadyCycles{pool: pool, sweeper: s, warm: true}
	d, n, err := c.cycle(ctx)
	if err != nil {
		return run, fmt.Errorf("hourly cycle: %w", err)
	}
	if n == 0 {
		return run, fmt.Errorf("hourly cycle deleted nothing: the seed's eligible hour is missing")
	}
	run.HourlyCycleMS, run.HourlyDeleted = ms(d), n
	if run.IdleCycleMS, err = c.idle(ctx); err != nil {
		return run, fmt.Errorf("idle cycle: %w", err)
	}
	if _, err := pool.Exec(ctx, "VACUUM event_outbox"); err != nil {
		return run, fmt.Errorf("vacuum: %w", err)
	}
	if run.IdleVacuumedCycleMS, err = c.idle(ctx); err != nil {
		return run, fmt.Errorf("idle cycle after vacuum: %w", err)
	}
	// The lease closes the connection it held: with nothing idle in the
	// pool, the next cycle connects first.
	c.warm = false
	if run.IdleColdCycleMS, err = c.idle(ctx); err != nil {
		return run, fmt.Errorf("idle cycle with a new connection: %w", err)
	}
	return run, nil
}

// steadyCycles times sweep cycles on one copy. A cycle in serve finds an
// idle connection in the service's pool (the outbox drain keeps one): warm
// makes sure there is one before the clock starts, so a cycle's cost is its
// own, not a new connection's. The cold cycle (as `sweep --once`, a new
// process) is reported apart.
type steadyCycles struct {
	pool    *pgxpool.Pool
	sweeper *sweep.Sweeper
	warm    bool
}

// cycle times one sweep cycle and returns the rows it deleted.
func (c *steadyCycles) cycle(ctx context.Context) (time.Duration, int64, error) {
	if c.warm {
		if _, err := c.pool.Exec(ctx, "SELECT 1"); err != nil {
			return 0, 0, err
		}
	}
	start := time.Now()
	rep, err := c.sweeper.RunOnce(ctx)
	d := time.Since(start)
	if err == nil && !rep.LockAcquired {
		err = fmt.Errorf("the sweep lease was taken")
	}
	return d, rep.Deleted(), err
}

// idle is the median of idleCycles cycles that must find nothing eligible.
func (c *steadyCycles) idle(ctx context.Context) (float64, error) {
	var ds []float64
	for range idleCycles {
		d, n, err := c.cycle(ctx)
		if err != nil {
			return 0, err
		}
		if n != 0 {
			return 0, fmt.Errorf("a cycle with nothing eligible deleted %d rows", n)
		}
		ds = append(ds, ms(d))
	}
	return median(ds), nil
}
