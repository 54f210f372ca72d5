package archiveread

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/craig/retention/kernel/metrics"
)

// DeepEvery is how often a scheduled verification is deep.
const DeepEvery = 7 * 24 * time.Hour

// RunVerifier verifies the archives every interval until ctx ends (the
// first run one interval after start), deep when DeepEvery has passed since
// the last deep run (so the first run is deep), counting failures and the
// finish time; it logs failures and never stops on one.
func (r *Reader) RunVerifier(ctx context.Context, interval time.Duration, m *metrics.Verify, logger *slog.Logger) {
	var lastDeep time.Time
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		deep := r.now().Sub(lastDeep) >= DeepEvery
		rep, err := r.Verify(ctx, deep, 0)
		switch {
		case errors.Is(err, context.Canceled) && ctx.Err() != nil:
			return
		case err != nil:
			logger.ErrorContext(ctx, "scheduled archive verification failed", slog.Any("error", err))
			continue
		}
		if deep {
			lastDeep = r.now()
		}
		m.Observe(rep.FailureKinds(), rep.OrphanCount)
		level := slog.LevelInfo
		if rep.Failed > 0 {
			level = slog.LevelWarn
		}
		logger.Log(ctx, level, "scheduled archive verification", slog.Bool("deep", deep), slog.Int("checked", rep.Checked),
			slog.Int("failed", rep.Failed), slog.Int("orphans", rep.OrphanCount), slog.Any("column_drift", rep.ColumnDrift))
	}
}
