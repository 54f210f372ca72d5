package prune

import (
	"context"
	"fmt"
	"time"
)

// Pacing protects the database a prune cleans: it pauses the
// batch loop while a streaming replica lags behind, and paces the loop's
// WAL to a rate. Both are off in the zero value.
type Pacing struct {
	// MaxReplicaLag: before each batch the loop reads the replay lag of
	// every streaming replica of the server (pg_stat_replication) and,
	// above this bound, waits until it falls back under it. 0: no check.
	MaxReplicaLag time.Duration
	// MaxWALBytesPerSecond: the loop measures the WAL written around each
	// of its batches (pg_current_wal_insert_lsn) and sleeps so that its
	// WAL since the call began stays under this rate. 0: no pacing.
	MaxWALBytesPerSecond int64
	// MaxPause bounds the total time one call waits; a call that reaches
	// it ends (Report.PauseExhausted names why) and the table waits for the
	// next cycle. 0: DefaultMaxPause.
	MaxPause time.Duration
	// Paused, when set, is told of every wait as it happens (the sweep
	// counts it in retention_prune_paused_seconds_total{table,reason}).
	Paused func(reason string, d time.Duration)
}

// Why a prune waited.
const (
	PauseReplicaLag = "replica_lag"
	PauseWALRate    = "wal_rate"
)

const (
	// DefaultMaxPause is how long one call may wait in all: a minute, so a
	// replica stuck for good costs each cycle a minute and the sweep says
	// so, instead of holding the lease for ever.
	DefaultMaxPause = time.Minute
	// MaxMaxReplicaLag, MaxMaxPause and MaxMaxWALBytesPerSecond bound the
	// settings: beyond them a value is a typo, not a policy.
	MaxMaxReplicaLag        = time.Hour
	MaxMaxPause             = time.Hour
	MaxMaxWALBytesPerSecond = 10 << 30
	// replicaPollMin and replicaPollMax bound how often a paused loop reads
	// the lag again (a tenth of the bound in between).
	replicaPollMin = 20 * time.Millisecond
	replicaPollMax = time.Second
)

// replicaLag reads the largest replay lag, in seconds, of the server's
// streaming replicas that have not replayed everything written so far (one
// that has is not behind, whatever lag it last reported), and how many
// replicas this role may not see the lag of (it needs pg_monitor or
// pg_read_all_stats). Kernel-built catalog SQL (sqlc's catalog does not
// have the statistics views); no parameter.
const replicaLag = `
SELECT coalesce(max(CASE WHEN replay_lsn < pg_current_wal_lsn()
                         THEN extract(epoch FROM coalesce(replay_lag, interval '0'))
                         ELSE 0 END), 0)::float8,
       count(*) FILTER (WHERE state IS NULL)
FROM pg_catalog.pg_stat_replication`

// walInsertBytes is the WAL insert position in bytes (kernel-built, no
// parameter).
const walInsertBytes = `SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_insert_lsn(), '0/0')::bigint`

func (g Pacing) problems(table string) error {
	switch {
	case g.MaxReplicaLag < 0 || g.MaxReplicaLag > MaxMaxReplicaLag:
		return fmt.Errorf("%w: %s: replica lag bound %v outside 0..%v", ErrInvalidPolicy, table, g.MaxReplicaLag, MaxMaxReplicaLag)
	case g.MaxWALBytesPerSecond < 0 || g.MaxWALBytesPerSecond > MaxMaxWALBytesPerSecond:
		return fmt.Errorf("%w: %s: WAL rate %d outside 0..%d bytes/s", ErrInvalidPolicy, table, g.MaxWALBytesPerSecond, int64(MaxMaxWALBytesPerSecond))
	case g.MaxPause < 0 || g.MaxPause > MaxMaxPause:
		return fmt.Errorf("%w: %s: pause bound %v outside 0..%v", ErrInvalidPolicy, table, g.MaxPause, MaxMaxPause)
	}
	return nil
}

// pacer is one call's pacing state.
type pacer struct {
	g      Pacing
	db     DB
	rep    *Report
	start  time.Time
	wal    int64 // WAL written around the call's batches
	before int64 // the insert position before the current batch
	sleep  func(context.Context, time.Duration) error
}

func newPacer(g Pacing, db DB, rep *Report) *pacer {
	if g.MaxPause == 0 {
		g.MaxPause = DefaultMaxPause
	}
	return &pacer{g: g, db: db, rep: rep, start: time.Now(), sleep: sleepCtx}
}

// paused is the call's total wait so far.
func (c *pacer) paused() time.Duration { return c.rep.PausedReplicaLag + c.rep.PausedWALRate }

// beforeBatch waits while a replica lags past the bound and reads the WAL
// position when pacing WAL. ok is false when the call's pause budget ran
// out (Report.PauseExhausted says why): the loop then ends.
func (c *pacer) beforeBatch(ctx context.Context) (ok bool, err error) {
	if c.g.MaxReplicaLag > 0 {
		if ok, err := c.waitForReplicas(ctx); err != nil || !ok {
			return ok, err
		}
	}
	if c.g.MaxWALBytesPerSecond > 0 {
		if err := c.db.QueryRow(ctx, walInsertBytes).Scan(&c.before); err != nil {
			return false, fmt.Errorf("wal position: %w", err)
		}
	}
	return true, nil
}

// waitForReplicas polls the replicas' lag until it is under the bound.
func (c *pacer) waitForReplicas(ctx context.Context) (bool, error) {
	poll := min(max(c.g.MaxReplicaLag/10, replicaPollMin), replicaPollMax)
	for {
		var lagSeconds float64
		var unreadable int64
		if err := c.db.QueryRow(ctx, replicaLag).Scan(&lagSeconds, &unreadable); err != nil {
			return false, fmt.Errorf("replica lag: %w", err)
		}
		c.rep.ReplicaLagUnreadable = c.rep.ReplicaLagUnreadable || unreadable > 0
		lag := time.Duration(lagSeconds * float64(time.Second))
		c.rep.MaxReplicaLagSeen = max(c.rep.MaxReplicaLagSeen, lag)
		if lag <= c.g.MaxReplicaLag {
			return true, nil
		}
		if !c.wait(ctx, PauseReplicaLag, poll, &c.rep.PausedReplicaLag) {
			return false, ctx.Err()
		}
	}
}

// afterBatch counts the batch's WAL and sleeps what keeps the call's WAL
// under the rate; ok is false as for beforeBatch.
func (c *pacer) afterBatch(ctx context.Context) (ok bool, err error) {
	if c.g.MaxWALBytesPerSecond == 0 {
		return true, nil
	}
	var after int64
	if err := c.db.QueryRow(ctx, walInsertBytes).Scan(&after); err != nil {
		return false, fmt.Errorf("wal position: %w", err)
	}
	c.wal += max(0, after-c.before)
	c.rep.WALBytes = c.wal
	due := time.Duration(float64(c.wal) / float64(c.g.MaxWALBytesPerSecond) * float64(time.Second))
	if ahead := due - time.Since(c.start); ahead > 0 {
		if !c.wait(ctx, PauseWALRate, ahead, &c.rep.PausedWALRate) {
			return false, ctx.Err()
		}
	}
	return true, nil
}

// wait sleeps d (at most what is left of the budget), counting it in
// *total; false when the budget is spent (PauseExhausted set) or ctx ended.
func (c *pacer) wait(ctx context.Context, reason string, d time.Duration, total *time.Duration) bool {
	left := c.g.MaxPause - c.paused()
	if left <= 0 {
		c.rep.PauseExhausted = reason
		return false
	}
	d = min(d, left)
	start := time.Now()
	err := c.sleep(ctx, d)
	slept := time.Since(start)
	*total += slept
	if c.g.Paused != nil {
		c.g.Paused(reason, slept)
	}
	return err == nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
