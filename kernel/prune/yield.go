package prune

import (
	"context"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
)

// YieldHold is how long PruneTable keeps its batches small after it last saw
// another session commit a write: a service writing a few events a second
// commits every few hundred milliseconds, and one second covers those gaps,
// so a steady writer is yielded to for as long as it writes, while a drain
// with nobody else writing runs at the full batch size.
const YieldHold = time.Second

// YieldProbe is how long a call runs small batches at its start before it
// trusts that nobody is writing: the first full batch would otherwise land
// on a writer it had no chance to see yet (the bench's writer p99 came out
// at 2-2.5x in the rounds where that happened). A service staging 40 events
// a second or more shows within it; with nobody writing it costs the bench's
// drain about 3% (its first 25 ms at the yield batch size).
const YieldProbe = 25 * time.Millisecond

// yieldWatch notices other writers between batches. Every database of a
// server shares one WAL, and a commit waits for the WAL written before it to
// reach the disk: a writer that commits while a batch of thousands of rows is
// being written waits for that batch's WAL as well as its own (the bench
// measured its p99 commit latency at 2.2-2.7x with 5,000-row batches, 0.86x
// with 250-row ones). So while other sessions are committing writes, the
// loop runs the yield batch size (a hundredth by default); when none have
// for YieldHold, the full batch size again. A call starts
// small, for YieldProbe, until it has had the time to see a writer.
//
// The signal is the server's transaction horizon (queries/kernel/prune.sql):
// a batch's DELETE takes one transaction id, so any further movement between
// two readings is somebody else's write. Read-only traffic never moves it.
type yieldWatch struct {
	horizon func(context.Context) (int64, error)
	last    int64
	ok      bool // last is a reading
	until   time.Time
	now     func() time.Time
	enabled bool
	seen    bool // a writer was seen in this call
	probing bool // the probe window has started (at the first batch)
}

func newYieldWatch(ctx context.Context, db DB, enabled bool) (*yieldWatch, error) {
	w := &yieldWatch{horizon: queries.New(db).WriteHorizon, now: time.Now, enabled: enabled}
	if !enabled {
		return w, nil
	}
	if err := w.read(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *yieldWatch) read(ctx context.Context) error {
	h, err := w.horizon(ctx)
	if err != nil {
		return fmt.Errorf("write horizon: %w", err)
	}
	w.last, w.ok = h, true
	return nil
}

// observe takes a reading after a batch that may have taken one transaction
// id of its own (wrote is false only for a batch that deleted nothing and did
// not fail: it assigned none), and returns whether another session wrote
// since the previous reading.
func (w *yieldWatch) observe(ctx context.Context, wrote bool) (bool, error) {
	if !w.enabled {
		return false, nil
	}
	prev, had := w.last, w.ok
	if err := w.read(ctx); err != nil {
		return false, err
	}
	own := int64(0)
	if wrote {
		own = 1
	}
	if had && w.last-prev > own {
		w.until, w.seen = w.now().Add(YieldHold), true
		return true, nil
	}
	return false, nil
}

// yielding reports whether the next batch should be small, and whether
// because of a writer seen in this call (not only the call's first
// YieldProbe).
func (w *yieldWatch) yielding() (small, forWriter bool) {
	if w.enabled && !w.probing {
		// The probe window starts at the call's first batch, not when the
		// watch was made: on a loaded machine the set-up before the first
		// batch (a pool's connection, the first reading) can outlast it.
		w.probing, w.until = true, w.now().Add(YieldProbe)
	}
	small = w.enabled && w.now().Before(w.until)
	return small, small && w.seen
}
