package archive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/craig/retention/kernel/outbox"
)

// Worker runs scheduled passes.
type Worker struct {
	engine   *Engine
	interval time.Duration
	budget   int
	logger   *slog.Logger
}

// NewWorker returns the scheduled worker. It refuses (ErrDisabled) unless
// the archiver is enabled (defence in depth: the caller checks too) and
// refuses a zero interval (manual runs only: no worker at all).
func NewWorker(enabled bool, e *Engine, interval time.Duration, budget int, logger *slog.Logger) (*Worker, error) {
	if !enabled {
		return nil, fmt.Errorf("%w: the scheduled archive worker needs archive.enabled=true", ErrDisabled)
	}
	if e == nil || logger == nil || interval <= 0 || budget < 1 {
		return nil, fail(ErrConfig, "", errors.New("worker needs an engine, a logger, a positive interval and a budget of at least 1"))
	}
	return &Worker{engine: e, interval: interval, budget: budget, logger: logger}, nil
}

// StartDelay is the deterministic jitter before a service's first pass: a
// hash of the service name within one interval, so services stagger and
// replicas of one service align (the lease lets exactly one of them run).
// It is the sweep's jitter (outbox.PruneJitter) in nanoseconds.
func StartDelay(service string, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	return time.Duration(outbox.PruneJitter(service, uint64(interval)))
}

// Run runs a pass after the start delay and then every interval until ctx is
// cancelled; it returns nil then. Failures are logged, never fatal.
func (w *Worker) Run(ctx context.Context) error {
	timer := time.NewTimer(StartDelay(w.engine.cfg.Service, w.interval))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		rep, err := w.engine.RunPass(ctx, w.budget)
		switch {
		case errors.Is(err, context.Canceled):
			return nil
		case errors.Is(err, ErrAlreadyRunning):
			w.logger.DebugContext(ctx, "archive pass skipped: another replica holds the lease")
		case err != nil:
			w.logger.ErrorContext(ctx, "archive pass failed", slog.Any("error", err))
		case rep.Err() != nil:
			w.logger.WarnContext(ctx, "archive pass finished with table errors", slog.Any("error", rep.Err()))
		}
		timer.Reset(w.interval)
	}
}
