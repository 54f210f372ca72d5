package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/failpoint"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/kernel/vacuumwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
)

// pendingGaugeInterval is how often serve refreshes the outbox gauges
// (outbox_pending_rows, outbox_oldest_pending_age_seconds): a count over the
// pending index is cheap, but not worth running every one-second tick.
const pendingGaugeInterval = 15 * time.Second

// serveCmd is `<svc> serve`: the outbox worker (drain + hourly sweep), the
// archiver when enabled, and the HTTP server, until the context ends.
type serveCmd[T any] struct{}

func (*serveCmd[T]) define(*flag.FlagSet) {}
func (*serveCmd[T]) check() error         { return nil }
func (*serveCmd[T]) run(ctx context.Context, rt *runtime[T]) (int, error) {
	return exitFor(rt.serve(ctx))
}

// serve boots everything, then runs the HTTP server, the outbox worker and
// the archiver under one errgroup until ctx ends or one of them fails; then
// it shuts the HTTP server down and waits for the workers, so no batch runs
// on a closed pool.
func (r *runtime[T]) serve(ctx context.Context) error {
	pool, err := r.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := checkPlans(ctx, pool, sweep.Policies(Groups(r.spec, r.cfg)), r.tr.PlanCheckSeqScanRows, r.logger); err != nil {
		return fmt.Errorf("plan check: %w", err)
	}
	arch, err := r.startArchiver(ctx, pool, reg)
	if err != nil {
		return err // the archiver was asked for and cannot run: refuse to boot
	}
	defer arch.close()
	keys, invMetrics, err := r.serveMetrics(reg)
	if err != nil {
		return err
	}
	archiveAPI, verifier, err := r.archiveSide(ctx, pool, arch, reg, keys, invMetrics)
	if err != nil {
		return err
	}
	pub, err := r.publisher(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close() }()
	inbound, err := r.startInbound(pool, reg, archiveAPI)
	if err != nil {
		return err
	}
	worker, err := r.outboxWorker(pool, pub, reg, invMetrics)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", r.tr.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", r.tr.HTTPAddr, err)
	}
	srv, ln := NewServer(Handler(HandlerDeps{
		Pool: pool, Gatherer: reg, Replay: ReplayLimits(r.tr), Broker: pub,
		AdminToken: r.tr.AdminToken, Archive: archiveAPI, Logger: r.logger,
		Retention: &RetentionAPI{Retention: r.retention(), Verifier: keys.verifier, AdminToken: r.tr.AdminToken, Metrics: keys.metrics, Logger: r.logger},
		Outbox:    &OutboxAPI{Pool: pool, Verifier: keys.verifier, AdminToken: r.tr.AdminToken, Metrics: keys.metrics, Logger: r.logger},
	}), ln, DefaultServerLimits())
	r.logger.Info("serving", slog.String("service", r.spec.Name), slog.String("addr", ln.Addr().String()))
	if err := runServe(ctx, srv, ln, worker, arch.worker, inbound, verifier); err != nil {
		return err
	}
	r.logger.Info("stopped", slog.String("service", r.spec.Name))
	return nil
}

// serveMetrics are serve's admin API keys (with their refusal metrics) and
// the invariants gauge the sweep's watchdogs and the journal check share.
func (r *runtime[T]) serveMetrics(reg prometheus.Registerer) (adminKeys, *metrics.Invariants, error) {
	keys, err := r.adminKeys(reg)
	if err != nil {
		return keys, nil, err
	}
	inv, err := metrics.NewInvariants(reg)
	return keys, inv, err
}

// publisher is serve's event publisher, signing with the configured key. A
// broker outage must not stop the service: sweeps, the archiver and metrics
// go on, the publisher reconnects with backoff, and the outage shows in
// /readyz, the outbox gauges and OutboxNotDraining.
func (r *runtime[T]) publisher(ctx context.Context) (*rabbitmq.Publisher, error) {
	signer, err := loadSigner(r.spec.Name, r.tr.Events)
	if err != nil {
		return nil, err
	}
	pub, err := rabbitmq.NewLazyPublisher(ctx, r.tr.AMQPURL, r.tr.AMQPExchange, r.logger)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	return pub.SignWith(signer).Mandatory(r.tr.Outbox.Mandatory), nil
}

// archiveSide is serve's archive API (nil: not served) and its scheduled
// archive verifier (nil: none).
func (r *runtime[T]) archiveSide(ctx context.Context, pool *pgxpool.Pool, arch *archiver, reg prometheus.Registerer, keys adminKeys,
	inv *metrics.Invariants) (*ArchiveAPI, func(context.Context) error, error) {
	reader, verifier, err := r.archiveReader(ctx, pool, arch, reg)
	if err != nil {
		return nil, nil, err
	}
	lm, err := r.lifecycleManager(ctx, pool, arch, reg)
	if err != nil {
		return nil, nil, err
	}
	api, err := r.archiveAPI(lm, arch, reader, keys)
	if err != nil {
		return nil, nil, err
	}
	if api != nil {
		if api.Orders, err = r.courtOrders(ctx, pool, arch); err != nil {
			return nil, nil, err
		}
		api.Schedules = schedule.New(pool, scheduleSeries(archiveTables(r.spec, r.cfg))).WithJournal(arch.journal)
		if as, ok := r.archiveSettings(); ok {
			key, err := as.SubjectKey() // bound to the database by the lifecycle manager
			if err != nil {
				return nil, nil, err
			}
			api.Clocks = schedule.NewClocks(pool, key).WithJournal(arch.journal)
			if api.CaseEvents, err = metrics.NewCaseEvents(reg, schedule.CaseEventTypes()); err != nil {
				return nil, nil, err
			}
			if api.Reader != nil {
				api.Dispositions = disposition.NewFinder(pool, key, archiveTables(r.spec, r.cfg), api.Schedules)
				if api.DispositionMetrics, err = metrics.NewDispositions(reg); err != nil {
					return nil, nil, err
				}
				if api.Orders != nil {
					api.Dispositions.WithExecution(disposition.Execution{Service: r.spec.Name, Orders: api.Orders, Store: arch.store,
						Index: IndexAllCaseRows(api.Reader), Journal: arch.journal, Executed: api.DispositionMetrics.ExecutedRows})
				}
			}
		}
	}
	watch, err := r.ledgerWatch(lm, reg)
	if err != nil {
		return nil, nil, err
	}
	var background []func(context.Context) error
	for _, f := range []func(context.Context) error{verifier, r.lockReconciler(lm, arch), watch, r.journalWatch(arch, inv), r.dueWatch(api)} {
		if f != nil {
			background = append(background, f)
		}
	}
	if len(background) == 0 {
		return api, nil, nil
	}
	return api, func(ctx context.Context) error {
		g, gctx := errgroup.WithContext(ctx)
		for _, f := range background {
			g.Go(func() error { return f(gctx) })
		}
		return g.Wait()
	}, nil
}

// outboxWorker builds serve's worker: every tick drains the outbox (after
// reconnecting the publisher within its backoff, so readiness recovers with
// the broker even with nothing pending) and refreshes the outbox gauges
// every pendingGaugeInterval; every PruneEveryTicks it sweeps, and the
// replica that ran each group exports its invariants (ExportInvariants)
// and what holds VACUUM back (WatchVacuum).
func (r *runtime[T]) outboxWorker(pool *pgxpool.Pool, pub *rabbitmq.Publisher, reg prometheus.Registerer, invMetrics *metrics.Invariants) (*outbox.Worker, error) {
	sweeper, err := r.sweeper(pool, reg)
	if err != nil {
		return nil, err
	}
	vm, err := metrics.NewVacuum(reg)
	if err != nil {
		return nil, err
	}
	vm.Known(vacuumwatch.Holders())
	limits := VacuumLimits(r.spec.Transport(r.cfg))
	vacuumwatch.ExportLimits(vm, limits)
	exportInvariants, watchVacuum := ExportInvariants(invMetrics, r.logger), WatchVacuum(vm, r.logger, limits)
	sweeper = sweeper.WithGroupHook(func(ctx context.Context, db prune.DB, g sweep.Group, ran bool) {
		exportInvariants(ctx, db, g, ran)
		watchVacuum(ctx, db, g, ran)
	})
	obm, err := metrics.NewOutbox(reg)
	if err != nil {
		return nil, err
	}
	drainer := &outbox.Drainer{Pool: pool, Publisher: pub, Logger: r.logger, Metrics: obm, MaxAttempts: r.tr.Outbox.MaxAttempts}
	var gaugedAt time.Time // only the worker's goroutine touches it
	w := &outbox.Worker{
		Service: r.spec.Name,
		Drain: func(ctx context.Context) error {
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
	// A failpoints build (the fault suite's) may shorten the cadence;
	// a production build has no such knob.
	if poll, every, ok := failpoint.Cadence(); ok {
		w.PollInterval, w.PruneEveryTicks = poll, every
	}
	return w, nil
}

// runServe runs the HTTP server, the worker, the archiver and the
// background runners (the inbound consumers, the archive verifier; nil:
// none) until ctx ends or one of them fails, then shuts the server down
// within shutdownTimeout and waits for all of them. Cancellation is not an
// error.
func runServe(ctx context.Context, srv *http.Server, ln net.Listener, worker *outbox.Worker, archiver *archive.Worker, background ...func(context.Context) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := worker.Run(gctx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("outbox worker stopped: %w", err)
		}
		if ctx.Err() == nil && gctx.Err() == nil {
			return errors.New("outbox worker stopped")
		}
		return nil
	})
	if archiver != nil {
		g.Go(func() error {
			_ = archiver.Run(gctx) // nil on cancellation; it logs its own failures
			return nil
		})
	}
	for _, run := range background {
		if run != nil {
			g.Go(func() error { return run(gctx) })
		}
	}
	g.Go(func() error {
		<-gctx.Done() // the caller stopped us, or a goroutine failed
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http shutdown: %w", err)
		}
		return nil
	})
	return g.Wait()
}
