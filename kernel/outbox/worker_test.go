package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/craig/retention/kernel/outbox"
	"github.com/stretchr/testify/require"
)

// serviceNames are the services whose sweeps must stagger.
var serviceNames = []string{"exchange", "financial", "rules", "security"}

// waitLimit is how long a test waits for a signal before failing; it is a
// deadline, never a sleep.
const waitLimit = 10 * time.Second

// callLog records the order of drain and sweep calls.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, s)
}

func (c *callLog) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// sweepTicks returns, for each sweep in calls, the index of the tick it ran
// on (the number of drains before it, minus one).
func sweepTicks(calls []string) []uint64 {
	var ticks []uint64
	drains := uint64(0)
	for _, c := range calls {
		switch c {
		case "drain":
			drains++
		case "sweep":
			ticks = append(ticks, drains-1)
		}
	}
	return ticks
}

// runTicks runs w with injected ticks, delivers n of them, then closes the
// tick channel and waits for Run to return. The channel is unbuffered, so
// each send completes only when Run is back waiting: the previous tick's
// work is done.
func runTicks(t *testing.T, w *outbox.Worker, n int) {
	t.Helper()
	ticks := make(chan time.Time)
	w.Ticks = ticks
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	for i := range n {
		select {
		case ticks <- time.Now():
		case err := <-done:
			t.Fatalf("Run returned after %d ticks: %v", i, err)
		case <-time.After(waitLimit):
			t.Fatalf("tick %d not taken within %s", i, waitLimit)
		}
	}
	close(ticks)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatalf("Run did not return after its ticks were closed")
	}
}

func recordingWorker(service string, every uint64, log *callLog) *outbox.Worker {
	_, logger := newLogRecorder()
	return &outbox.Worker{
		Service:         service,
		PruneEveryTicks: every,
		Drain:           func(context.Context) error { log.add("drain"); return nil },
		Sweep:           func(context.Context) error { log.add("sweep"); return nil },
		Logger:          logger,
	}
}

func TestPruneCadenceIsHourly(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Hour, outbox.PruneEveryTicks*outbox.PollInterval)
	require.Equal(t, time.Second, outbox.PollInterval)
}

func TestPruneJitter(t *testing.T) {
	t.Parallel()
	seen := map[uint64]string{}
	for _, s := range serviceNames {
		j := outbox.PruneJitter(s, outbox.PruneEveryTicks)
		require.Less(t, j, uint64(outbox.PruneEveryTicks), s)
		require.Equal(t, j, outbox.PruneJitter(s, outbox.PruneEveryTicks), "%s: jitter must be deterministic", s)
		other, dup := seen[j]
		require.False(t, dup, "%s and %s share jitter %d: their sweeps would align", s, other, j)
		seen[j] = s
	}
	require.Zero(t, outbox.PruneJitter("rules", 0), "every 0 must not divide by zero")
	require.Zero(t, outbox.PruneJitter("rules", 1))
}

// TestWorkerDrainsBeforeSweeping pins the order: on a sweep tick the drain
// runs first, and every tick drains exactly once.
func TestWorkerDrainsBeforeSweeping(t *testing.T) {
	t.Parallel()
	const every, n = 3, 9
	for _, service := range serviceNames {
		t.Run(service, func(t *testing.T) {
			t.Parallel()
			log := &callLog{}
			runTicks(t, recordingWorker(service, every, log), n)

			jitter := outbox.PruneJitter(service, every)
			var want []string
			for k := range uint64(n) {
				want = append(want, "drain")
				if k%every == jitter {
					want = append(want, "sweep")
				}
			}
			require.Equal(t, want, log.snapshot())
		})
	}
}

// TestWorkerSweepsAtJitteredTicks checks that the first sweep of a service
// runs on tick PruneJitter(service, every) and then every `every` ticks.
func TestWorkerSweepsAtJitteredTicks(t *testing.T) {
	t.Parallel()
	type tc struct {
		service string
		every   uint64
	}
	var tests []tc
	for _, s := range serviceNames {
		for _, every := range []uint64{1, 5, 7, outbox.PruneEveryTicks} {
			tests = append(tests, tc{service: s, every: every})
		}
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/every=%d", tc.service, tc.every), func(t *testing.T) {
			t.Parallel()
			jitter := outbox.PruneJitter(tc.service, tc.every)
			n := int(jitter + 2*tc.every + 1) // room for three sweeps
			log := &callLog{}
			runTicks(t, recordingWorker(tc.service, tc.every, log), n)

			want := []uint64{jitter, jitter + tc.every, jitter + 2*tc.every}
			require.Equal(t, want, sweepTicks(log.snapshot()))
		})
	}
}

func TestWorkerDefaultsToHourlySweeps(t *testing.T) {
	t.Parallel()
	const service = "security"
	jitter := outbox.PruneJitter(service, outbox.PruneEveryTicks)
	log := &callLog{}
	w := recordingWorker(service, 0, log) // 0: PruneEveryTicks
	runTicks(t, w, int(jitter+outbox.PruneEveryTicks+1))
	require.Equal(t, []uint64{jitter, jitter + outbox.PruneEveryTicks}, sweepTicks(log.snapshot()))
}

func TestWorkerLogsFailuresAndKeepsGoing(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("broker unreachable")
	const drainWarn, sweepWarn = "outbox drain failed", "event retention sweep failed"
	tests := []struct {
		name      string
		drainErr  error
		sweepErr  error
		wantWarns []string // over two ticks, both sweep ticks
	}{
		{
			name:      "drain and sweep fail",
			drainErr:  errBoom,
			sweepErr:  errBoom,
			wantWarns: []string{drainWarn, sweepWarn, drainWarn, sweepWarn},
		},
		{
			name:     "cancellation is not a failure",
			drainErr: fmt.Errorf("outbox drain: %w", context.Canceled),
			sweepErr: fmt.Errorf("sweep: %w", context.Canceled),
		},
		{
			name:      "a timeout is a failure",
			drainErr:  fmt.Errorf("outbox drain: %w", context.DeadlineExceeded),
			wantWarns: []string{drainWarn, drainWarn},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec, logger := newLogRecorder()
			log := &callLog{}
			w := &outbox.Worker{
				Service:         "exchange",
				PruneEveryTicks: 1, // sweep on every tick
				Drain:           func(context.Context) error { log.add("drain"); return tc.drainErr },
				Sweep:           func(context.Context) error { log.add("sweep"); return tc.sweepErr },
				Logger:          logger,
			}
			runTicks(t, w, 2)
			require.Equal(t, []string{"drain", "sweep", "drain", "sweep"}, log.snapshot(), "a failure must not stop the loop")
			var warns []string
			for _, a := range rec.attrsAt(slog.LevelWarn) {
				warns = append(warns, a["msg"])
				require.Equal(t, "exchange", a["service"])
				require.NotEmpty(t, a["error"])
			}
			require.Equal(t, tc.wantWarns, warns)
			require.Empty(t, rec.at(slog.LevelError))
		})
	}
}

func TestWorkerRunReturnsPromptlyOnCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setUp returns the worker and a function that brings the loop to
		// the state in which it is cancelled.
		setUp func(t *testing.T) (*outbox.Worker, func())
	}{
		{
			name: "waiting for an injected tick",
			setUp: func(*testing.T) (*outbox.Worker, func()) {
				return &outbox.Worker{Service: "rules", Drain: noop, Ticks: make(chan time.Time)}, func() {}
			},
		},
		{
			name: "waiting for the real ticker",
			setUp: func(*testing.T) (*outbox.Worker, func()) {
				return &outbox.Worker{Service: "rules", Drain: noop, PollInterval: time.Hour}, func() {}
			},
		},
		{
			name: "in the middle of a drain",
			setUp: func(t *testing.T) (*outbox.Worker, func()) {
				ticks := make(chan time.Time, 1)
				started := make(chan struct{})
				swept := make(chan struct{}, 1)
				w := &outbox.Worker{
					Service:         "rules",
					PruneEveryTicks: 1, // every tick is a sweep tick
					Ticks:           ticks,
					Drain: func(ctx context.Context) error {
						close(started)
						<-ctx.Done()
						return ctx.Err()
					},
					Sweep: func(context.Context) error { swept <- struct{}{}; return nil },
				}
				t.Cleanup(func() { require.Empty(t, swept, "a cancelled tick must not go on to sweep") })
				return w, func() {
					ticks <- time.Now()
					select {
					case <-started:
					case <-time.After(waitLimit):
						t.Fatal("drain did not start")
					}
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, reach := tc.setUp(t)
			_, w.Logger = newLogRecorder()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			reach()
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(waitLimit):
				t.Fatal("Run did not return after cancel")
			}
		})
	}
}

func TestWorkerRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		w    outbox.Worker
	}{
		{name: "no drain", w: outbox.Worker{Service: "rules"}},
		{name: "no service", w: outbox.Worker{Drain: noop}},
		{name: "negative poll interval", w: outbox.Worker{Service: "rules", Drain: noop, PollInterval: -time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorIs(t, tc.w.Run(context.Background()), outbox.ErrInvalidWorker)
		})
	}
}

func noop(context.Context) error { return nil }
