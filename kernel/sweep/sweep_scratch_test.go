package sweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
)

// testTimeout bounds a test's database work: a bound for a stalled run,
// not a rate (TestDryRunNeverMakesARealSweepSkip's 200 cycles beside
// constant dry runs took 32 s alone and over 60 s on a loaded machine).
const testTimeout = 5 * time.Minute

// logRecorder is kerneltest.LogRecorder with this package's assertions.
type logRecorder struct{ *kerneltest.LogRecorder }

type logEntry struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

// entries returns the records at level whose message contains msg.
func (r *logRecorder) entries(level slog.Level, msg string) []logEntry {
	var out []logEntry
	for _, rec := range r.Records() {
		if rec.Level != level || !strings.Contains(rec.Message, msg) {
			continue
		}
		e := logEntry{level: rec.Level, msg: rec.Message, attrs: map[string]any{}}
		rec.Attrs(func(a slog.Attr) bool {
			e.attrs[a.Key] = a.Value.Resolve().Any()
			return true
		})
		out = append(out, e)
	}
	return out
}

func (r *logRecorder) atLeast(level slog.Level) int { return len(r.Messages(level, math.MaxInt)) }

type testBundle struct {
	db      *kerneltest.DB
	reg     *prometheus.Registry
	metrics *metrics.Prune
	logs    *logRecorder
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)

	reg := prometheus.NewRegistry()
	m, err := metrics.NewPrune(reg)
	require.NoError(t, err)

	return ctx, &testBundle{
		db:      kerneltest.NewDB(t, migrations.Transport()),
		reg:     reg,
		metrics: m,
		logs:    &logRecorder{&kerneltest.LogRecorder{}},
	}
}

func (b *testBundle) sweeper(t *testing.T, groups ...sweep.Group) *sweep.Sweeper {
	t.Helper()
	s, err := sweep.New(b.db.Pool, groups, slog.New(b.logs), b.metrics)
	require.NoError(t, err)
	return s
}

// insertOutbox inserts n outbox rows of a kind created ageDays ago,
// published at the same instant if published.
func insertOutbox(t *testing.T, db *kerneltest.DB, kind string, n, ageDays int, published bool) {
	t.Helper()
	db.Exec(t, `
		INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT $1, '{}', now() - make_interval(days => $2::int),
		       CASE WHEN $3::bool THEN now() - make_interval(days => $2::int) END
		FROM generate_series(1, $4::int)`, kind, ageDays, published, n)
}

func insertInbox(t *testing.T, db *kerneltest.DB, kind string, n, ageDays int) {
	t.Helper()
	db.Exec(t, `
		INSERT INTO event_inbox (event_id, event_type, received_at)
		SELECT gen_random_uuid(), $1, now() - make_interval(days => $2::int)
		FROM generate_series(1, $3::int)`, kind, ageDays, n)
}

func countOutbox(t *testing.T, db *kerneltest.DB) int64 {
	t.Helper()
	return db.Count(t, "SELECT count(*) FROM event_outbox")
}

func countInbox(t *testing.T, db *kerneltest.DB) int64 {
	t.Helper()
	return db.Count(t, "SELECT count(*) FROM event_inbox")
}

// holdLock takes the advisory lock key on a session of its own, as another
// replica would, until the returned release is called (or the test ends).
func holdLock(ctx context.Context, t *testing.T, db *kerneltest.DB, key int64) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key)
	require.NoError(t, err)
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", key)
			require.NoError(t, err)
			require.NoError(t, conn.Close(context.Background()))
		})
	}
	t.Cleanup(release)
	return release
}

// withoutDurations zeroes the wall-time field so reports compare exactly.
func withoutDurations(tables []sweep.TableReport) []sweep.TableReport {
	out := slices.Clone(tables)
	for i := range out {
		out[i].DurationMS = 0
	}
	return out
}

func transport(batch int, cycleCap int64) sweep.Group {
	return outboxAndInbox(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, BatchSize: batch, CycleCap: cycleCap})
}

// outboxAndInbox is the transport group without its third policy, the
// outbox's dead letters (their own tests: TestDeadLettersInTheTransportCycle
// and kernel/outbox): these tests pin the two tables' report lines exactly.
func outboxAndInbox(c sweep.TransportConfig) sweep.Group {
	g := sweep.Transport(c)
	g.Policies = slices.DeleteFunc(g.Policies, func(p prune.Policy) bool { return p.Label() == sweep.OutboxDeadLetters })
	return g
}

// fakeGroup is a local group over tables that need not exist: its policies'
// batch deletes record their calls and return what fn says.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) add(table string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, table)
}

func (c *callLog) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

func fakePolicy(table string, log *callLog, fn func() (int64, error)) prune.Policy {
	return prune.Policy{
		Declaration: prune.Declaration{
			Table: table,
			DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
				log.add(table)
				return fn()
			},
		},
		Bounds: prune.Bounds{
			WindowDays: 30,
		},
	}
}

func TestSweeperRunOnce(t *testing.T) {
	t.Parallel()

	t.Run("TransportGroup", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 3, 31, true)
		insertOutbox(t, db, "aged_pending", 2, 31, false)
		insertOutbox(t, db, "fresh_published", 2, 1, true)
		insertInbox(t, db, "aged", 4, 32)
		insertInbox(t, db, "fresh", 1, 30)

		rep, err := bundle.sweeper(t, transport(2, 0)).RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, rep.LockAcquired)
		require.Equal(t, []sweep.TableReport{
			{Table: sweep.OutboxTable, Group: "transport", Deleted: 3, Batches: 2},
			{Table: sweep.InboxTable, Group: "transport", Deleted: 4, Batches: 3},
		}, withoutDurations(rep.Tables))
		require.Equal(t, int64(7), rep.Deleted())

		require.Equal(t, int64(4), countOutbox(t, db), "2 pending + 2 fresh remain")
		require.Equal(t, int64(1), countInbox(t, db))

		m := bundle.metrics
		require.InDelta(t, 3, testutil.ToFloat64(m.RowsPruned.WithLabelValues(sweep.OutboxTable)), 0)
		require.InDelta(t, 4, testutil.ToFloat64(m.RowsPruned.WithLabelValues(sweep.InboxTable)), 0)
		require.Zero(t, testutil.CollectAndCount(m.Capped))
		require.Zero(t, testutil.CollectAndCount(m.Failures))
		require.Zero(t, testutil.CollectAndCount(m.LockSkipped))
		require.Equal(t, 2, testutil.CollectAndCount(m.Duration), "one duration series per table")

		infos := bundle.logs.entries(slog.LevelInfo, "retention prune deleted rows")
		require.Len(t, infos, 2)
		require.Equal(t, sweep.OutboxTable, infos[0].attrs["table"])
		require.Equal(t, int64(3), infos[0].attrs["deleted"])
		require.Equal(t, sweep.InboxTable, infos[1].attrs["table"])
		require.Equal(t, int64(4), infos[1].attrs["deleted"])
		require.Zero(t, bundle.logs.atLeast(slog.LevelWarn))

		// The shape `sweep --once --json` prints.
		raw, err := json.Marshal(rep)
		require.NoError(t, err)
		var doc struct {
			LockAcquired *bool `json:"lock_acquired"`
			Tables       []map[string]any
		}
		require.NoError(t, json.Unmarshal(raw, &doc))
		require.NotNil(t, doc.LockAcquired)
		require.True(t, *doc.LockAcquired)
		require.Len(t, doc.Tables, 2)
		require.Equal(t, "event_outbox", doc.Tables[0]["table"])
		require.InDelta(t, 3, doc.Tables[0]["deleted"], 0)
		require.Equal(t, false, doc.Tables[0]["capped"])
		require.NotContains(t, doc.Tables[0], "skipped")
		require.NotContains(t, doc.Tables[0], "error")
	})

	t.Run("NothingEligible", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		insertOutbox(t, bundle.db, "fresh", 2, 1, true)

		rep, err := bundle.sweeper(t, transport(0, 0)).RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, rep.LockAcquired)
		require.Equal(t, []sweep.TableReport{
			{Table: sweep.OutboxTable, Group: "transport", Batches: 1},
			{Table: sweep.InboxTable, Group: "transport", Batches: 1},
		}, withoutDurations(rep.Tables))
		require.Empty(t, bundle.logs.entries(slog.LevelInfo, "retention prune deleted rows"), "idle cycles are not logged at info")
		require.InDelta(t, 0, testutil.ToFloat64(bundle.metrics.RowsPruned.WithLabelValues(sweep.OutboxTable)), 0)
	})

	t.Run("LockHeldElsewhere", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 3, 31, true)
		insertInbox(t, db, "aged", 4, 32)
		release := holdLock(ctx, t, db, lease.TransportKey)

		s := bundle.sweeper(t, transport(0, 0))
		rep, err := s.RunOnce(ctx)
		require.NoError(t, err, "a held lease is not an error")
		require.False(t, rep.LockAcquired)
		require.Equal(t, []sweep.TableReport{
			{Table: sweep.OutboxTable, Group: "transport", Skipped: sweep.SkipLockHeld},
			{Table: sweep.InboxTable, Group: "transport", Skipped: sweep.SkipLockHeld},
		}, rep.Tables)
		require.Equal(t, "lock_held", sweep.SkipLockHeld)
		require.Zero(t, rep.Deleted())
		require.Equal(t, int64(3), countOutbox(t, db), "nothing deleted")
		require.Equal(t, int64(4), countInbox(t, db), "nothing deleted")

		m := bundle.metrics
		require.InDelta(t, 1, testutil.ToFloat64(m.LockSkipped.WithLabelValues(sweep.TransportGroupName)), 0)
		require.Zero(t, testutil.CollectAndCount(m.RowsPruned), "no table was pruned")
		require.Zero(t, bundle.logs.atLeast(slog.LevelWarn), "skipping is routine, not a warning")

		// Once the other runner lets go, the next cycle sweeps.
		release()
		rep, err = s.RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, rep.LockAcquired)
		require.Equal(t, int64(7), rep.Deleted())
		require.InDelta(t, 1, testutil.ToFloat64(m.LockSkipped.WithLabelValues(sweep.TransportGroupName)), 0)
	})

	t.Run("WindowZeroSkipsThatTableOnly", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 3, 400, true)
		insertInbox(t, db, "aged", 4, 32)

		g := outboxAndInbox(sweep.TransportConfig{OutboxWindowDays: 0, InboxWindowDays: 31})
		rep, err := bundle.sweeper(t, g).RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, rep.LockAcquired)
		require.Equal(t, []sweep.TableReport{
			{Table: sweep.OutboxTable, Group: "transport", Skipped: sweep.SkipDisabled},
			{Table: sweep.InboxTable, Group: "transport", Deleted: 4, Batches: 1},
		}, withoutDurations(rep.Tables))
		require.Equal(t, "disabled", sweep.SkipDisabled)
		require.Equal(t, int64(3), countOutbox(t, db), "outbox untouched")
		require.Zero(t, countInbox(t, db), "inbox still swept")

		require.Equal(t, 1, testutil.CollectAndCount(bundle.metrics.RowsPruned), "only the inbox is recorded")
	})

	t.Run("AllDisabledTakesNoLease", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		holdLock(ctx, t, bundle.db, lease.TransportKey)

		g := outboxAndInbox(sweep.TransportConfig{})
		rep, err := bundle.sweeper(t, g).RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, rep.LockAcquired, "nothing to do is not a skipped lease")
		require.Equal(t, []sweep.TableReport{
			{Table: sweep.OutboxTable, Group: "transport", Skipped: sweep.SkipDisabled},
			{Table: sweep.InboxTable, Group: "transport", Skipped: sweep.SkipDisabled},
		}, rep.Tables)
		require.Zero(t, testutil.CollectAndCount(bundle.metrics.LockSkipped))
	})

	t.Run("OutboxThenInbox", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 2, 31, true)
		insertInbox(t, db, "aged", 2, 32)

		// Record the batch calls in the order they happen; the batch deletes
		// are the real ones.
		calls := &callLog{}
		g := transport(1, 0)
		for i := range g.Policies {
			p := &g.Policies[i]
			inner, table := p.DeleteBatch, p.Table
			p.DeleteBatch = func(ctx context.Context, d prune.DB, bp prune.BatchParams) (int64, error) {
				calls.add(table)
				return inner(ctx, d, bp)
			}
		}

		rep, err := bundle.sweeper(t, g).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(4), rep.Deleted())
		// Batch size 1 and two rows each: two full batches and one empty.
		require.Equal(t, []string{
			sweep.OutboxTable, sweep.OutboxTable, sweep.OutboxTable,
			sweep.InboxTable, sweep.InboxTable, sweep.InboxTable,
		}, calls.get(), "every outbox batch runs before any inbox batch")
		require.Equal(t, []string{sweep.OutboxTable, sweep.InboxTable}, []string{rep.Tables[0].Table, rep.Tables[1].Table})
	})

	t.Run("OutboxFailureLeavesInboxUntouched", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 5, 31, true)
		insertInbox(t, db, "aged", 4, 32)

		boom := errors.New("boom")
		g := transport(2, 0)
		inner, batches := g.Policies[0].DeleteBatch, 0
		g.Policies[0].DeleteBatch = func(ctx context.Context, d prune.DB, bp prune.BatchParams) (int64, error) {
			batches++
			if batches == 2 {
				return 0, boom
			}
			return inner(ctx, d, bp)
		}

		rep, err := bundle.sweeper(t, g).RunOnce(ctx)
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, "sweep group transport")
		require.True(t, rep.LockAcquired)
		require.Len(t, rep.Tables, 2)
		out, in := rep.Tables[0], rep.Tables[1]
		require.Equal(t, int64(2), out.Deleted, "the committed first batch is reported")
		require.Contains(t, out.Error, "boom")
		require.Empty(t, out.Skipped)
		require.Equal(t, sweep.InboxTable, in.Table)
		require.Equal(t, sweep.SkipNotReached, in.Skipped)
		require.Zero(t, in.Deleted)

		require.Equal(t, int64(3), countOutbox(t, db))
		require.Equal(t, int64(4), countInbox(t, db), "the inbox is kept when the outbox prune fails")

		m := bundle.metrics
		require.InDelta(t, 1, testutil.ToFloat64(m.Failures.WithLabelValues(sweep.OutboxTable)), 0)
		require.InDelta(t, 2, testutil.ToFloat64(m.RowsPruned.WithLabelValues(sweep.OutboxTable)), 0)
		errs := bundle.logs.entries(slog.LevelError, "retention prune failed")
		require.Len(t, errs, 1)
		require.Equal(t, sweep.OutboxTable, errs[0].attrs["table"])
	})

	t.Run("FailureStopsOnlyItsGroup", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 3, 31, true)
		insertInbox(t, db, "aged", 4, 32)

		boom := errors.New("boom")
		calls := &callLog{}
		ok := func() (int64, error) { return 0, nil }
		groups := []sweep.Group{
			{Name: "first", LockKey: 11, Policies: []prune.Policy{fakePolicy("first_a", calls, ok)}},
			{Name: "broken", LockKey: 12, Policies: []prune.Policy{
				fakePolicy("broken_a", calls, func() (int64, error) { return 0, boom }),
				fakePolicy("broken_b", calls, ok),
				{Declaration: prune.Declaration{Table: "broken_c", DeleteBatch: noopBatch}},
			}},
			transport(0, 0),
		}

		rep, err := bundle.sweeper(t, groups...).RunOnce(ctx)
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, "sweep group broken")
		require.True(t, rep.LockAcquired)

		tables := make([]string, len(rep.Tables))
		for i, tr := range rep.Tables {
			tables[i] = tr.Table
		}
		require.Equal(t, []string{"first_a", "broken_a", "broken_b", "broken_c", sweep.OutboxTable, sweep.InboxTable}, tables,
			"one entry per registered table, in sweep order")

		require.Empty(t, rep.Tables[0].Skipped)
		require.Contains(t, rep.Tables[1].Error, "boom")
		require.Equal(t, sweep.SkipNotReached, rep.Tables[2].Skipped, "later tables of the failed group are not reached")
		require.Equal(t, "not_reached", sweep.SkipNotReached)
		require.Equal(t, sweep.SkipDisabled, rep.Tables[3].Skipped, "a disabled table stays disabled")
		require.Equal(t, int64(3), rep.Tables[4].Deleted, "the next group still runs")
		require.Equal(t, int64(4), rep.Tables[5].Deleted)

		require.Equal(t, []string{"first_a", "broken_a"}, calls.get())
		require.Zero(t, countOutbox(t, db))
		require.Zero(t, countInbox(t, db))
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()

		ctx, bundle := setup(t)
		db := bundle.db
		insertOutbox(t, db, "aged_published", 3, 31, true)

		cctx, cancel := context.WithCancel(ctx)
		cancel()
		rep, err := bundle.sweeper(t, transport(0, 0)).RunOnce(cctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Len(t, rep.Tables, 2)
		for _, tr := range rep.Tables {
			require.Equal(t, sweep.SkipNotReached, tr.Skipped)
			require.NotEmpty(t, tr.Error)
		}
		require.Equal(t, int64(3), countOutbox(t, db))
		require.Zero(t, bundle.logs.atLeast(slog.LevelWarn), "a shutdown is not an error")
	})
}

func TestSweeperCycleCap(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		cycleCap   int64
		eligible   int
		wantCapped bool
	}{
		{name: "StopsAndWarns", cycleCap: 250, eligible: 1000, wantCapped: true},
		// The loop cannot tell "exactly cap rows" from "more than cap rows"
		// without deleting past the cap, so reaching it warns.
		{name: "ReachedExactly", cycleCap: 300, eligible: 300, wantCapped: true},
		{name: "BelowCap", cycleCap: 300, eligible: 299, wantCapped: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			ctx, bundle := setup(t)
			db := bundle.db
			insertOutbox(t, db, "aged_published", tt.eligible, 31, true)
			insertInbox(t, db, "aged", tt.eligible, 32)

			rep, err := bundle.sweeper(t, transport(100, tt.cycleCap)).RunOnce(ctx)
			require.NoError(t, err)
			require.True(t, rep.LockAcquired)

			wantDeleted := min(int64(tt.eligible), tt.cycleCap)
			remain := int64(tt.eligible) - wantDeleted
			for _, tr := range rep.Tables {
				require.Equal(t, wantDeleted, tr.Deleted, tr.Table)
				require.Equal(t, tt.wantCapped, tr.Capped, tr.Table)
				require.Empty(t, tr.Error)
			}
			require.Equal(t, remain, countOutbox(t, db))
			require.Equal(t, remain, countInbox(t, db), "the cap applies per table")

			warns := bundle.logs.entries(slog.LevelWarn, "cycle cap")
			capped := 0
			if tt.wantCapped {
				capped = 1
				require.Len(t, warns, 2)
				for i, table := range []string{sweep.OutboxTable, sweep.InboxTable} {
					require.Equal(t, table, warns[i].attrs["table"])
					require.Equal(t, "transport", warns[i].attrs["group"])
					require.Equal(t, wantDeleted, warns[i].attrs["deleted"])
					require.Equal(t, tt.cycleCap, warns[i].attrs["cycle_cap"])
				}
				require.Empty(t, bundle.logs.entries(slog.LevelInfo, "retention prune deleted rows"))
			} else {
				require.Empty(t, warns)
				require.Len(t, bundle.logs.entries(slog.LevelInfo, "retention prune deleted rows"), 2)
			}

			want := fmt.Sprintf(`
# HELP event_rows_pruned_total Rows deleted by the retention sweep, per table.
# TYPE event_rows_pruned_total counter
event_rows_pruned_total{table="event_inbox"} %[1]d
event_rows_pruned_total{table="event_outbox"} %[1]d
`, wantDeleted)
			if tt.wantCapped {
				want += `
# HELP retention_prune_capped_total Sweep cycles stopped by the per-cycle anomaly cap, per table.
# TYPE retention_prune_capped_total counter
retention_prune_capped_total{table="event_inbox"} 1
retention_prune_capped_total{table="event_outbox"} 1
`
			}
			require.NoError(t, testutil.GatherAndCompare(bundle.reg, strings.NewReader(want),
				"event_rows_pruned_total", "retention_prune_capped_total"))
			require.InDelta(t, capped, testutil.ToFloat64(bundle.metrics.Capped.WithLabelValues(sweep.OutboxTable)), 0)
		})
	}
}

// TestSweeperRecordsDuration pins that the report's duration_ms and the
// retention_prune_duration_seconds histogram carry the time a table's prune
// took (regression: prune.PruneTable used to return Duration 0 on success).
func TestSweeperRecordsDuration(t *testing.T) {
	t.Parallel()

	ctx, bundle := setup(t)
	insertOutbox(t, bundle.db, "aged_published", 10, 31, true)
	insertInbox(t, bundle.db, "aged", 10, 32)

	rep, err := bundle.sweeper(t, transport(0, 0)).RunOnce(ctx)
	require.NoError(t, err)
	for _, tr := range rep.Tables {
		require.Positive(t, tr.DurationMS, "%s: a prune that ran statements took time", tr.Table)
	}

	families, err := bundle.reg.Gather()
	require.NoError(t, err)
	var found int
	for _, mf := range families {
		if mf.GetName() != "retention_prune_duration_seconds" {
			continue
		}
		for _, metric := range mf.GetMetric() {
			found++
			h := metric.GetHistogram()
			require.Equal(t, uint64(1), h.GetSampleCount())
			require.Positive(t, h.GetSampleSum(), "%v", metric.GetLabel())
		}
	}
	require.Equal(t, 2, found)
}

// TestTransportPoliciesConform runs the conformance suite on the kernel's
// own outbox and inbox policies: their Eligible selects what their keyset
// deletes delete, and their Keep is Eligible's exact complement (partition
// retirement drops a partition on Keep's word).
func TestTransportPoliciesConform(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	insertOutbox(t, b.db, "old.published", 30, 40, true)
	insertOutbox(t, b.db, "old.pending", 5, 40, false)
	insertOutbox(t, b.db, "new.published", 7, 1, true)
	insertOutbox(t, b.db, "new.pending", 3, 1, false)
	insertInbox(t, b.db, "old", 20, 40)
	insertInbox(t, b.db, "new", 4, 1)
	// Dead letters: 6 dead-lettered 40 days ago (swept at 30 days), 2
	// dead-lettered yesterday (kept), whatever their created_at.
	b.db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, dead_lettered_at, attempts)
		SELECT 'dead', '{}', now() - interval '50 days', now() - make_interval(days => CASE WHEN g <= 6 THEN 40 ELSE 1 END), 3
		FROM generate_series(1, 8) AS g`)
	policies := sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 30, DeadLetterWindowDays: 30, BatchSize: 7}).Policies
	require.Len(t, policies, 3)
	for _, p := range policies {
		require.NotEmpty(t, p.Keep, p.Label())
		kerneltest.CheckPolicy(t, b.db, p)
	}
	require.Equal(t, int64(17), countOutbox(t, b.db), "the pending rows, the new rows and the young dead letters stay")
	require.Equal(t, int64(4), countInbox(t, b.db))
}

// TestSweeperReportsPauses: the pacing bounds reach every
// policy through Bounds; a table whose prune waited reports it
// (paused_seconds by reason) and counts it in
// retention_prune_paused_seconds_total{table,reason} as it waits, and one
// whose pause budget ran out says so (pause_exhausted) and warns.
func TestSweeperReportsPauses(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	insertOutbox(t, b.db, "aged_published", 3000, 31, true)
	groups := sweep.Bounds{Pacing: prune.Pacing{MaxWALBytesPerSecond: 64 << 10, MaxPause: time.Second}}.Apply([]sweep.Group{transport(100, 100_000)})
	require.Equal(t, int64(64<<10), groups[0].Policies[0].Pacing.MaxWALBytesPerSecond)
	require.Equal(t, time.Second, groups[0].Policies[1].Pacing.MaxPause)

	rep, err := b.sweeper(t, groups...).RunOnce(ctx)
	require.NoError(t, err)
	out := rep.Tables[0]
	require.Equal(t, sweep.OutboxTable, out.Table)
	require.Positive(t, out.PausedSeconds[prune.PauseWALRate])
	require.Equal(t, prune.PauseWALRate, out.PauseExhausted, "3000 rows' WAL at 64 KiB/s takes longer than the 1 s budget")
	require.Less(t, out.Deleted, int64(3000))
	counted := testutil.ToFloat64(b.metrics.Paused.WithLabelValues(sweep.OutboxTable, prune.PauseWALRate))
	require.InDelta(t, out.PausedSeconds[prune.PauseWALRate], counted, 0.001, "the metric counts every wait")
	require.Len(t, b.logs.entries(slog.LevelWarn, "pause budget ran out"), 1)
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"paused_seconds":{"wal_rate":`)
	require.Contains(t, string(raw), `"pause_exhausted":"wal_rate"`)
}

// TestDeadLettersInTheTransportCycle: the transport cycle sweeps the
// outbox's dead letters under their own label, after the inbox, by their own
// window, and reports them disabled (kept) at window 0.
func TestDeadLettersInTheTransportCycle(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	db := bundle.db
	insertOutbox(t, db, "aged_published", 2, 31, true)
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, dead_lettered_at, attempts)
		SELECT 'dead', '{}', now() - interval '90 days', now() - make_interval(days => d), 25 FROM unnest(ARRAY[60, 40, 2]) AS d`)

	off, err := bundle.sweeper(t, sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31})).RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, off.Tables, 3)
	require.Equal(t, sweep.TableReport{Table: sweep.OutboxDeadLetters, Group: "transport", Skipped: sweep.SkipDisabled}, withoutDurations(off.Tables)[2])
	require.Equal(t, int64(3), countOutbox(t, db), "the published rows went; every dead letter stays at window 0")

	on, err := bundle.sweeper(t, sweep.Transport(sweep.TransportConfig{OutboxWindowDays: 30, InboxWindowDays: 31, DeadLetterWindowDays: 30})).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sweep.OutboxDeadLetters, on.Tables[2].Table)
	require.Equal(t, int64(2), on.Tables[2].Deleted)
	require.Equal(t, int64(1), countOutbox(t, db), "the dead letter of two days stays")
	require.InDelta(t, 2, testutil.ToFloat64(bundle.metrics.RowsPruned.WithLabelValues(sweep.OutboxDeadLetters)), 0, "its own counter")
}
