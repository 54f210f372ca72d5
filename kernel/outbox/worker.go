package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"
)

const (
	// PollInterval is how often the worker drains the outbox: the longest an
	// event waits between its commit and its publish on an idle service.
	PollInterval = time.Second

	// PruneEveryTicks is how many poll ticks pass between two transport
	// sweeps: PruneEveryTicks × PollInterval = one hour. Retention windows
	// are days long, so an hourly sweep keeps the backlog of a cycle small
	// without running DELETEs every second.
	PruneEveryTicks = 3600
)

// ErrInvalidWorker is returned (wrapped) by Run for a Worker that cannot run.
var ErrInvalidWorker = errors.New("outbox: invalid worker")

// Worker is the outbox worker loop of one service: every
// tick it drains, and every PruneEveryTicks ticks, at a per-service offset,
// it then sweeps.
type Worker struct {
	// Service names the service; it seeds the prune jitter.
	Service string
	// Drain publishes pending outbox rows (typically a closure over
	// Drainer.DrainOnce). Required.
	Drain func(ctx context.Context) error
	// Sweep runs one transport sweep cycle (typically a closure over
	// sweep.Sweeper.RunOnce, which logs and meters its own outcome). nil
	// means the worker only drains.
	Sweep func(ctx context.Context) error
	// PollInterval is the tick period; 0 means PollInterval.
	PollInterval time.Duration
	// PruneEveryTicks is the sweep cadence in ticks; 0 means PruneEveryTicks.
	PruneEveryTicks uint64
	// Ticks, when non-nil, replaces the ticker (tests inject ticks here).
	// Run returns when it is closed.
	Ticks <-chan time.Time
	// Logger receives a WARN per failed drain or sweep; nil means
	// slog.Default().
	Logger *slog.Logger
}

// PruneJitter is the tick (counted from 0, the first tick of Run) of the
// first sweep of service: the FNV-64a hash of its name modulo every. It is
// deterministic, so the replicas of one service sweep on the same ticks (and
// the advisory lease lets one of them do it) while different services
// spread over the period instead of all sweeping at tick 0. every 0 yields 0.
func PruneJitter(service string, every uint64) uint64 {
	if every == 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(service)) // a hash.Hash never returns an error
	return h.Sum64() % every
}

// Run loops until ctx is cancelled (or an injected Ticks channel is closed)
// and then returns nil; a cancelled ctx ends the wait for the next tick at
// once. Each tick it runs Drain and then, on the ticks PruneJitter(Service,
// every) + k × every, Sweep. Failures are logged (WARN) and the loop goes on.
func (w *Worker) Run(ctx context.Context) error {
	if w.Drain == nil || w.Service == "" {
		return fmt.Errorf("%w: service name and drain are required", ErrInvalidWorker)
	}
	if w.PollInterval < 0 {
		return fmt.Errorf("%w: negative poll interval %s", ErrInvalidWorker, w.PollInterval)
	}
	every := w.PruneEveryTicks
	if every == 0 {
		every = PruneEveryTicks
	}
	ticks := w.Ticks
	if ticks == nil {
		interval := w.PollInterval
		if interval == 0 {
			interval = PollInterval
		}
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		ticks = ticker.C
	}
	// The counter starts where the jitter-th tick (counted from 0) is a
	// multiple of every: (start + jitter) % every == 0.
	tick := (every - PruneJitter(w.Service, every)) % every
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-ticks:
			if !ok {
				return nil
			}
		}
		if ctx.Err() != nil {
			return nil // cancelled while a tick was ready: do not start work
		}
		// Drain FIRST, then sweep: a worker
		// that recovers from an outage publishes its backlog before anything
		// is deleted. The sweep only deletes published rows, so this is belt
		// and braces, but it is the order the retention argument is made in.
		// Do not reorder.
		w.report(ctx, "outbox drain failed", w.Drain(ctx))
		if ctx.Err() != nil {
			return nil
		}
		if w.Sweep != nil && tick%every == 0 {
			w.report(ctx, "event retention sweep failed", w.Sweep(ctx))
		}
		// Unsigned addition wraps at 2^64 ticks (some 584 billion years at
		// one tick a second); the counter only sets the cadence, so a wrap
		// would shift one sweep and harm nothing.
		tick++
	}
}

func (w *Worker) report(ctx context.Context, msg string, err error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		// The publisher logs the outage (once, and at each retry it
		// schedules); a line a second here would drown it.
		w.logger().DebugContext(ctx, msg+" (broker unavailable)", slog.String("service", w.Service), slog.Any("error", err))
	case errors.Is(err, context.Canceled):
		// Shutdown, not a failure.
		w.logger().DebugContext(ctx, msg+" (cancelled)", slog.String("service", w.Service))
	default:
		w.logger().WarnContext(ctx, msg, slog.String("service", w.Service), slog.Any("error", err))
	}
}

func (w *Worker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.Default()
	}
	return w.Logger
}
