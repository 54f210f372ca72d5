package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/prune"

	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// pendingGaugeInterval is how often serve refreshes the outbox gauges
// (outbox_pending_rows, outbox_oldest_pending_age_seconds): a count over the
// pending index is cheap, but not worth running every one-second tick.
const pendingGaugeInterval = 15 * time.Second

type runtime[T any] struct {
	spec   Spec[T]
	cfg    T
	tr     settings.Transport
	logger *slog.Logger
	sets   []migrations.Set
	stdout io.Writer
}

// pool opens the service's database pool. Every connection it opens is
// bounded by database_connect_timeout (TCP, TLS and the startup
// handshake), and so is the first ping: a server that accepts connections
// and never answers fails the command naming the database, instead of
// hanging it.
func (r *runtime[T]) pool(ctx context.Context) (*pgxpool.Pool, error) {
	return OpenPool(ctx, r.tr.DatabaseURL, r.tr.DatabaseConnectTimeout)
}

// OpenPool opens a pool on databaseURL whose connections are opened within
// connectTimeout, and pings it within the same bound. Errors name the
// database without its password.
func OpenPool(ctx context.Context, databaseURL string, connectTimeout time.Duration) (*pgxpool.Pool, error) {
	where := settings.Redact(databaseURL)
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("database_url %s: does not parse as a PostgreSQL connection string", where)
	}
	cfg.ConnConfig.ConnectTimeout = connectTimeout
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database pool %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeoutCause(ctx, connectTimeout, fmt.Errorf("database %s did not answer within database_connect_timeout=%v", where, connectTimeout))
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() == nil && pctx.Err() != nil { // our bound fired, not the caller's
			return nil, fmt.Errorf("%w: %w", context.Cause(pctx), err)
		}
		return nil, fmt.Errorf("database %s unreachable: %w", where, err)
	}
	return pool, nil
}

func (r *runtime[T]) migrate(ctx context.Context) error {
	pool, err := r.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer func() { _ = db.Close() }()
	n, err := migrate.Up(ctx, db, r.sets, nil)
	if err != nil {
		return err
	}
	if n > 0 {
		r.logger.Info("migrations applied", slog.String("service", r.spec.Name), slog.Int("applied", n))
	} else {
		r.logger.Debug("migrations already current", slog.String("service", r.spec.Name))
	}
	return nil
}

// Groups returns every sweep group of a service: the transport group first,
// then the service's own, with the configured batch bounds applied to every
// policy.
func Groups[T any](spec Spec[T], cfg T) []sweep.Group {
	tr := spec.Transport(cfg)
	groups := []sweep.Group{sweep.Transport(sweep.TransportConfig{
		OutboxWindowDays: tr.EventOutboxRetentionDays,
		InboxWindowDays:  tr.EventInboxRetentionDays,
		YieldToWriters:   tr.PruneYieldToWriters,
	})}
	if spec.LocalGroups != nil {
		groups = append(groups, spec.LocalGroups(cfg)...)
	}
	return sweep.Bounds{
		BatchSize:        tr.PruneBatchSize,
		CycleCap:         tr.PruneCycleCap,
		StatementTimeout: tr.PruneStatementTimeout,
		LockTimeout:      tr.PruneLockTimeout,
	}.Apply(groups)
}

// ExportInvariants is serve's group hook: the replica that ran a group's
// sweep checks the group's watchdogs right after it, under the group's
// lease, and exports them (retention_invariant_violations). A replica that
// did not run the group (another held the lease) removes its series for
// the group's invariants instead: while the leader drains a backlog the
// tables overrun by design, and a stale or mid-drain count from a replica
// must not raise RetentionInvariantViolated (issue 9 finding 15).
func ExportInvariants(m *metrics.Invariants, logger *slog.Logger) sweep.GroupHook {
	return func(ctx context.Context, db prune.DB, g sweep.Group, ran bool) {
		var specs []invariants.Spec
		for _, p := range g.Policies {
			specs = append(specs, invariants.ForPolicy(p)...)
		}
		if !ran {
			for _, s := range specs {
				m.Violations.DeleteLabelValues(s.Name)
			}
			return
		}
		results, err := invariants.CheckAll(ctx, db, specs)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				logger.ErrorContext(ctx, "invariant check after the sweep failed", slog.String("group", g.Name), slog.Any("error", err))
			}
			return
		}
		for _, res := range results {
			m.Violations.WithLabelValues(res.Name).Set(float64(res.Violations))
		}
	}
}

// ReplayLimits are the admin replay's bounds from the transport settings.
func ReplayLimits(tr settings.Transport) outbox.ReplayLimits {
	return outbox.ReplayLimits{
		OutboxWindowDays: tr.EventOutboxRetentionDays, MaxAgeDays: tr.ReplayMaxAgeDays,
		MaxRows: tr.ReplayMaxRows, BatchSize: tr.PruneBatchSize,
	}
}

// InvariantSpecs returns the watchdog of every swept table of a service.
func InvariantSpecs[T any](spec Spec[T], cfg T) []invariants.Spec {
	var out []invariants.Spec
	policies := sweep.Policies(Groups(spec, cfg))
	for _, p := range policies {
		out = append(out, invariants.FromPolicy(p))
	}
	for _, p := range policies { // the future-dated watchdogs after every overrun one
		out = append(out, invariants.FutureFromPolicy(p))
	}
	return out
}

func (r *runtime[T]) sweeper(pool *pgxpool.Pool, reg prometheus.Registerer) (*sweep.Sweeper, error) {
	m, err := metrics.NewPrune(reg)
	if err != nil {
		return nil, err
	}
	return sweep.New(pool, Groups(r.spec, r.cfg), r.logger, m)
}

func (r *runtime[T]) sweepOnce(ctx context.Context, dryRun, asJSON bool) error {
	pool, err := r.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := r.sweeper(pool, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	run := s.RunOnce
	if dryRun {
		run = s.DryRun
	}
	rep, runErr := run(ctx)
	if asJSON {
		enc := json.NewEncoder(r.stdout)
		if err := enc.Encode(rep); err != nil {
			return errors.Join(runErr, fmt.Errorf("write report: %w", err))
		}
	} else if err := writeTable(r.stdout, rep); err != nil {
		return errors.Join(runErr, fmt.Errorf("write report: %w", err))
	}
	return runErr
}

func writeTable(w io.Writer, rep sweep.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if rep.DryRun {
		fmt.Fprintf(tw, "dry run: nothing deleted; leases free now: %v\n", rep.LockAcquired)
		fmt.Fprintln(tw, "TABLE\tGROUP\tELIGIBLE\tOLDEST ELIGIBLE\tBATCHES\tWOULD CAP\tSKIPPED")
		for _, t := range rep.Tables {
			eligible, oldest := "-", "-"
			if t.DryRunTable != nil {
				eligible = fmt.Sprint(t.Eligible)
				oldest = age(t.OldestEligibleAgeSeconds)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%s\n", t.Table, t.Group, eligible, oldest, t.Batches, t.Capped, dash(t.Skipped))
		}
		return tw.Flush()
	}
	fmt.Fprintf(tw, "lock acquired: %v\n", rep.LockAcquired)
	fmt.Fprintln(tw, "TABLE\tGROUP\tDELETED\tBATCHES\tCAPPED\tMS\tSKIPPED\tERROR")
	for _, t := range rep.Tables {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%v\t%.1f\t%s\t%s\n", t.Table, t.Group, t.Deleted, t.Batches, t.Capped, t.DurationMS, dash(t.Skipped), dash(t.Error))
	}
	return tw.Flush()
}

// age renders an age in seconds as days and hours, or "-" for none; a
// negative age (a row dated in the future) gets a minus sign. It computes in
// float seconds: an age beyond time.Duration's ±292 years (a BC or
// -infinity row) must not wrap around.
func age(secs *float64) string {
	if secs == nil {
		return "-"
	}
	s, sign := *secs, ""
	if s < 0 {
		s, sign = -s, "-"
	}
	return fmt.Sprintf("%s%.0fd%02.0fh", sign, math.Floor(s/86400), math.Floor(math.Mod(s, 86400)/3600))
}

// invariantsReport is the JSON form of `invariants --json`.
type invariantsReport struct {
	Invariants []invariants.Result `json:"invariants"`
}

func (r *runtime[T]) invariants(ctx context.Context, asJSON bool) (violated bool, err error) {
	pool, err := r.pool(ctx)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	results, err := invariants.CheckAll(ctx, pool, InvariantSpecs(r.spec, r.cfg))
	if err != nil {
		return false, err
	}
	if asJSON {
		if err := json.NewEncoder(r.stdout).Encode(invariantsReport{Invariants: results}); err != nil {
			return false, fmt.Errorf("write report: %w", err)
		}
		return invariants.Violated(results), nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT\tTABLE\tVIOLATIONS\tOLDEST OFFENDING\tTHRESHOLD")
	for _, res := range results {
		threshold := fmt.Sprintf("%dd", res.ThresholdDays)
		if res.FutureSkewSeconds > 0 {
			threshold = "now+" + (time.Duration(res.FutureSkewSeconds) * time.Second).String()
		}
		if res.Disabled {
			threshold = "disabled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", res.Name, res.Table, res.Violations, age(res.OldestAgeSeconds), threshold)
	}
	if err := tw.Flush(); err != nil {
		return false, fmt.Errorf("write report: %w", err)
	}
	return invariants.Violated(results), nil
}

// probe checks the database and the plan of every sweep's selection. It
// returns warned=true when a sweep would sequentially scan a table larger
// than plan_check_seqscan_rows.
func (r *runtime[T]) probe(ctx context.Context) (warned bool, err error) {
	pool, err := r.pool(ctx)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	fmt.Fprintf(r.stdout, "database: reachable (%s)\n", settings.Redact(r.tr.DatabaseURL))
	warnings, err := checkPlans(ctx, pool, sweep.Policies(Groups(r.spec, r.cfg)), r.tr.PlanCheckSeqScanRows, r.logger)
	if err != nil {
		return false, err
	}
	if err := r.probeArchive(ctx, pool); err != nil {
		return false, err
	}
	for _, w := range warnings {
		fmt.Fprintf(r.stdout, "WARN %s\n", w)
	}
	if len(warnings) == 0 {
		fmt.Fprintln(r.stdout, "sweep plans: every selection avoids a sequential scan of a large table")
	}
	return len(warnings) > 0, nil
}

// checkPlans EXPLAINs every enabled policy's selection and returns (and logs
// at WARN) one line per sweep that would scan a table above maxRows.
func checkPlans(ctx context.Context, db prune.DB, policies []prune.Policy, maxRows int64, logger *slog.Logger) ([]string, error) {
	var warnings []string
	for _, p := range policies {
		if p.WindowDays == 0 {
			continue
		}
		pc, err := prune.ExplainSelection(ctx, db, p)
		if err != nil {
			return warnings, err
		}
		if pc.SeqScan && pc.TableRows > float64(maxRows) {
			msg := fmt.Sprintf("%s: the sweep's selection scans the whole table (~%.0f rows, above plan_check_seqscan_rows=%d); is its index missing?\n%s",
				p.Table, pc.TableRows, maxRows, strings.TrimRight(pc.Plan, "\n"))
			logger.WarnContext(ctx, "sweep plan scans a large table: is its index missing?",
				slog.String("table", p.Table), slog.Float64("estimated_rows", pc.TableRows),
				slog.Int64("plan_check_seqscan_rows", maxRows), slog.String("plan", pc.Plan))
			warnings = append(warnings, msg)
		}
	}
	return warnings, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (r *runtime[T]) serve(ctx context.Context) error {
	pool, err := r.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sweeper, err := r.sweeper(pool, reg)
	if err != nil {
		return err
	}
	invMetrics, err := metrics.NewInvariants(reg)
	if err != nil {
		return err
	}
	sweeper = sweeper.WithGroupHook(ExportInvariants(invMetrics, r.logger))
	if _, err := checkPlans(ctx, pool, sweep.Policies(Groups(r.spec, r.cfg)), r.tr.PlanCheckSeqScanRows, r.logger); err != nil {
		return fmt.Errorf("plan check: %w", err)
	}
	archiver, closeArchiver, err := r.startArchiver(ctx, pool, reg)
	if err != nil {
		return err // the archiver was asked for and cannot run: refuse to boot (D10)
	}
	defer closeArchiver()
	// A broker outage must not stop the service: sweeps, the archiver and
	// metrics go on, the publisher reconnects with backoff, and the outage
	// shows in /readyz, the outbox gauges and OutboxNotDraining.
	pub, err := rabbitmq.NewLazyPublisher(ctx, r.tr.AMQPURL, r.tr.AMQPExchange, r.logger)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	defer func() { _ = pub.Close() }()
	obm, err := metrics.NewOutbox(reg)
	if err != nil {
		return err
	}
	drainer := &outbox.Drainer{Pool: pool, Publisher: pub, Logger: r.logger, Metrics: obm}
	var gaugedAt time.Time
	worker := &outbox.Worker{
		Service: r.spec.Name,
		Drain: func(ctx context.Context) error {
			// Reconnect (within the backoff) even when nothing is
			// pending, so /readyz recovers with the broker.
			_ = pub.EnsureConnected(ctx) // the publisher logs its own outage
			_, err := drainer.DrainOnce(ctx)
			if time.Since(gaugedAt) >= pendingGaugeInterval {
				gaugedAt = time.Now()
				err = errors.Join(err, outbox.PendingGauge(ctx, pool, obm))
			}
			return err
		},
		Sweep: func(ctx context.Context) error {
			_, err := sweeper.RunOnce(ctx)
			return err
		},
		Logger: r.logger,
	}

	ln, err := net.Listen("tcp", r.tr.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", r.tr.HTTPAddr, err)
	}
	srv, ln := NewServer(Handler(HandlerDeps{
		Pool: pool, Gatherer: reg, Replay: ReplayLimits(r.tr), Broker: pub,
		AdminToken: r.tr.AdminToken, Logger: r.logger,
	}), ln, DefaultServerLimits())
	r.logger.Info("serving", slog.String("service", r.spec.Name), slog.String("addr", ln.Addr().String()))

	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(ln) }()
	workerErr := make(chan error, 1)
	go func() { workerErr <- worker.Run(wctx) }()
	archiverDone := make(chan struct{})
	go func() {
		defer close(archiverDone)
		if archiver != nil {
			_ = archiver.Run(wctx) // returns nil on cancellation; it logs its own failures
		}
	}()

	var runErr error
	workerDone := false
	select {
	case <-ctx.Done():
	case err := <-httpErr:
		runErr = fmt.Errorf("http server: %w", err)
	case err := <-workerErr:
		workerDone = true
		runErr = fmt.Errorf("outbox worker stopped: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		runErr = errors.Join(runErr, fmt.Errorf("http shutdown: %w", err))
	}
	// Stop the workers and wait for them, so no batch runs on a closed pool.
	stopWorker()
	<-archiverDone
	if !workerDone {
		if err := <-workerErr; err != nil && !errors.Is(err, context.Canceled) {
			runErr = errors.Join(runErr, fmt.Errorf("outbox worker: %w", err))
		}
	}
	if runErr == nil {
		r.logger.Info("stopped", slog.String("service", r.spec.Name))
	}
	return runErr
}
