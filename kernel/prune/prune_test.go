package prune_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/prune"
)

// fakeTable is an in-memory table of eligible rows whose batch delete records
// the parameters of every call. It needs no database: the batch loop's
// arithmetic is tested here, the SQL in prune_scratch_test.go.
type fakeTable struct {
	eligible int64
	calls    []prune.BatchParams
}

func (f *fakeTable) deleteBatch(_ context.Context, _ prune.DB, p prune.BatchParams) (int64, error) {
	f.calls = append(f.calls, p)
	n := min(int64(p.Limit), f.eligible)
	f.eligible -= n
	return n, nil
}

func (f *fakeTable) limits() []int32 {
	out := make([]int32, len(f.calls))
	for i, c := range f.calls {
		out[i] = c.Limit
	}
	return out
}

func noopBatch(context.Context, prune.DB, prune.BatchParams) (int64, error) { return 0, nil }

func TestPolicyValidate(t *testing.T) {
	t.Parallel()

	valid := prune.Policy{Declaration: prune.Declaration{Table: "t", DeleteBatch: noopBatch}, Bounds: prune.Bounds{WindowDays: 30, BatchSize: 100, CycleCap: 1000}}

	tests := []struct {
		name    string
		mutate  func(p *prune.Policy)
		wantErr string // empty: valid
	}{
		{"Valid", func(*prune.Policy) {}, ""},
		{"WindowZeroDisables", func(p *prune.Policy) { p.WindowDays = 0 }, ""},
		{"WindowAtMax", func(p *prune.Policy) { p.WindowDays = prune.MaxWindowDays }, ""},
		{"DefaultsFromZero", func(p *prune.Policy) { p.BatchSize, p.CycleCap = 0, 0 }, ""},
		{"BatchSizeAtMaxInt32", func(p *prune.Policy) { p.BatchSize = math.MaxInt32 }, ""},
		{"EmptyTable", func(p *prune.Policy) { p.Table = "" }, "empty table name"},
		{"NilDeleteBatch", func(p *prune.Policy) { p.DeleteBatch = nil }, "no batch delete"},
		{"NegativeWindow", func(p *prune.Policy) { p.WindowDays = -1 }, "window -1 days outside 0..3650"},
		{"WindowAboveMax", func(p *prune.Policy) { p.WindowDays = prune.MaxWindowDays + 1 }, "window 3651 days outside 0..3650"},
		{"NegativeBatchSize", func(p *prune.Policy) { p.BatchSize = -1 }, "batch size -1"},
		{"BatchSizeAboveMaxInt32", func(p *prune.Policy) { p.BatchSize = math.MaxInt32 + 1 }, "batch size 2147483648"},
		{"NegativeCycleCap", func(p *prune.Policy) { p.CycleCap = -1 }, "negative cycle cap -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			p := valid
			tt.mutate(&p)
			err := p.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, prune.ErrInvalidPolicy)
			require.ErrorContains(t, err, tt.wantErr)

			// PruneTable refuses the same policy before running a batch.
			called := false
			p.DeleteBatch = func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
				called = true
				return 0, nil
			}
			if tt.name == "NilDeleteBatch" {
				p.DeleteBatch = nil
			}
			_, err = prune.PruneTable(context.Background(), nil, p)
			require.ErrorIs(t, err, prune.ErrInvalidPolicy)
			require.False(t, called)
		})
	}
}

func TestPruneTableLoop(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		batch       int
		cycleCap    int64
		eligible    int64
		wantDeleted int64
		wantLimits  []int32
		wantCapped  bool
	}{
		{"Empty", 100, 0, 0, 0, []int32{100}, false},
		{"ShortFirstBatch", 100, 0, 99, 99, []int32{100}, false},
		{"PastBatchSize", 100, 0, 1050, 1050, []int32{100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100}, false},
		// An exact multiple costs one extra, empty batch: a full batch never
		// proves the table is drained.
		{"ExactMultiple", 100, 0, 300, 300, []int32{100, 100, 100, 100}, false},
		// The last batch shrinks so the cap is never passed.
		{"CapStopsWithShrunkLastBatch", 100, 250, 1000, 250, []int32{100, 100, 50}, true},
		// Reaching the cap with a full batch is Capped even if nothing is
		// left: the loop cannot tell without deleting past the cap, so it
		// reports "rows may remain".
		{"CapEqualsEligible", 100, 300, 300, 300, []int32{100, 100, 100}, true},
		{"OneBelowCap", 100, 300, 299, 299, []int32{100, 100, 100}, false},
		{"CapBelowBatchSize", 100, 50, 120, 50, []int32{50}, true},
		{"DefaultBatchSize", 0, 0, 5001, 5001, []int32{5000, 5000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			ft := &fakeTable{eligible: tt.eligible}
			rep, err := prune.PruneTable(context.Background(), nil, prune.Policy{
				Declaration: prune.Declaration{
					Table:       "t",
					DeleteBatch: ft.deleteBatch,
				},
				Bounds: prune.Bounds{
					WindowDays: 30,
					BatchSize:  tt.batch,
					CycleCap:   tt.cycleCap,
				},
			})
			require.NoError(t, err)
			require.Equal(t, "t", rep.Table)
			require.False(t, rep.Disabled)
			require.Equal(t, tt.wantDeleted, rep.Deleted)
			require.Equal(t, len(tt.wantLimits), rep.Batches)
			require.Equal(t, tt.wantLimits, ft.limits())
			require.Equal(t, tt.wantCapped, rep.Capped)
			require.Equal(t, tt.eligible-tt.wantDeleted, ft.eligible)
			for _, c := range ft.calls {
				require.Equal(t, int32(30), c.WindowDays)
			}
		})
	}
}

func TestPruneTable(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	t.Run("WindowZeroRunsNoBatch", func(t *testing.T) {
		t.Parallel()

		ft := &fakeTable{eligible: 10}
		rep, err := prune.PruneTable(ctx, nil, prune.Policy{Declaration: prune.Declaration{Table: "t", DeleteBatch: ft.deleteBatch}, Bounds: prune.Bounds{WindowDays: 0}})
		require.NoError(t, err)
		rep.Duration = 0
		require.Equal(t, prune.Report{Table: "t", Disabled: true}, rep)
		require.Empty(t, ft.calls)
	})

	t.Run("WindowAndLimitAreBoundAsInt32", func(t *testing.T) {
		t.Parallel()

		ft := &fakeTable{eligible: 1}
		_, err := prune.PruneTable(ctx, nil, prune.Policy{
			Declaration: prune.Declaration{
				Table:       "t",
				DeleteBatch: ft.deleteBatch,
			},
			Bounds: prune.Bounds{
				WindowDays: prune.MaxWindowDays,
				BatchSize:  math.MaxInt32,
				CycleCap:   math.MaxInt64,
			},
		})
		require.NoError(t, err)
		require.Len(t, ft.calls, 1)
		require.NotNil(t, ft.calls[0].Cursor, "every batch of a call gets the call's cursor")
		ft.calls[0].Cursor = nil
		require.Equal(t, []prune.BatchParams{{WindowDays: prune.MaxWindowDays, Limit: math.MaxInt32}}, ft.calls)
	})

	t.Run("BatchErrorStopsAndWraps", func(t *testing.T) {
		t.Parallel()

		boom := errors.New("boom")
		calls := 0
		rep, err := prune.PruneTable(ctx, nil, prune.Policy{
			Declaration: prune.Declaration{
				Table: "t",
				DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
					calls++
					if calls == 3 {
						return 0, boom
					}
					return 10, nil
				},
			},
			Bounds: prune.Bounds{
				WindowDays: 30,
				BatchSize:  10,
			},
		})
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, "prune t: batch 3")
		require.Equal(t, 3, calls)
		require.Equal(t, 2, rep.Batches, "the failed batch is not counted")
		require.Equal(t, int64(20), rep.Deleted, "rows of committed batches are still reported")
	})

	t.Run("CancelledBeforeStart", func(t *testing.T) {
		t.Parallel()

		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ft := &fakeTable{eligible: 10}
		rep, err := prune.PruneTable(cctx, nil, prune.Policy{Declaration: prune.Declaration{Table: "t", DeleteBatch: ft.deleteBatch}, Bounds: prune.Bounds{WindowDays: 30}})
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, ft.calls)
		require.Zero(t, rep.Batches)
	})

	t.Run("CancelledBetweenBatches", func(t *testing.T) {
		t.Parallel()

		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ft := &fakeTable{eligible: 1000}
		rep, err := prune.PruneTable(cctx, nil, prune.Policy{
			Declaration: prune.Declaration{
				Table: "t",
				DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
					defer cancel() // the context ends after the first batch returns
					return ft.deleteBatch(ctx, db, p)
				},
			},
			Bounds: prune.Bounds{
				WindowDays: 30,
				BatchSize:  100,
			},
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, rep.Batches)
		require.Equal(t, int64(100), rep.Deleted)
		require.Len(t, ft.calls, 1)
	})

	// Duration must be the wall time spent on every return path. Regression
	// test: a deferred assignment to a local rep after `return rep, nil` is
	// lost when the results are unnamed, which left every successful report
	// (and the sweep's duration_ms and retention_prune_duration_seconds) at 0.
	t.Run("DurationIsMeasured", func(t *testing.T) {
		t.Parallel()

		const pause = 2 * time.Millisecond
		rep, err := prune.PruneTable(ctx, nil, prune.Policy{
			Declaration: prune.Declaration{
				Table: "t",
				DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
					time.Sleep(pause) // makes wall time pass; not a synchronisation
					return 0, nil
				},
			},
			Bounds: prune.Bounds{
				WindowDays: 30,
			},
		})
		require.NoError(t, err)
		require.GreaterOrEqual(t, rep.Duration, pause)

		// Also when the cap stops the loop and when a batch fails.
		rep, err = prune.PruneTable(ctx, nil, prune.Policy{
			Declaration: prune.Declaration{
				Table: "t",
				DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
					time.Sleep(pause)
					return 1, nil
				},
			},
			Bounds: prune.Bounds{
				WindowDays: 30,
				BatchSize:  1,
				CycleCap:   1,
			},
		})
		require.NoError(t, err)
		require.True(t, rep.Capped)
		require.GreaterOrEqual(t, rep.Duration, pause)

		rep, err = prune.PruneTable(ctx, nil, prune.Policy{
			Declaration: prune.Declaration{
				Table: "t",
				DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
					time.Sleep(pause)
					return 0, errors.New("boom")
				},
			},
			Bounds: prune.Bounds{
				WindowDays: 30,
			},
		})
		require.Error(t, err)
		require.GreaterOrEqual(t, rep.Duration, pause)
	})
}
