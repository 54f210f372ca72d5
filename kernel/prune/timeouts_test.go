package prune_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/prune"
)

// Outcomes of one scripted batch.
const (
	lockTimeout      = 'L' // SQLSTATE 55P03, as lock_timeout raises it
	statementTimeout = 'S' // SQLSTATE 57014, as statement_timeout raises it
	otherError       = 'E' // any other server error
	fullBatch        = 'F' // deletes its whole limit
)

// scripted is a batch delete that plays a script of outcomes, then reports
// short (empty) batches. It records the limit of every call.
type scripted struct {
	script []rune
	limits []int32
	// onCall, if set, runs before each call with the 1-based call number.
	onCall func(call int)
}

func (s *scripted) deleteBatch(_ context.Context, _ prune.DB, p prune.BatchParams) (int64, error) {
	s.limits = append(s.limits, p.Limit)
	if s.onCall != nil {
		s.onCall(len(s.limits))
	}
	if len(s.limits) > len(s.script) {
		return 0, nil
	}
	switch s.script[len(s.limits)-1] {
	case lockTimeout:
		return 0, &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}
	case statementTimeout:
		return 0, &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}
	case otherError:
		return 0, &pgconn.PgError{Code: "42P01", Message: "relation does not exist"}
	default:
		return int64(p.Limit), nil
	}
}

func repeat(n int, v int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func concat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// The timeout state machine, without a database: the loop reacts to the
// SQLSTATE of a failed batch, whoever raised it. (With StatementTimeout and
// LockTimeout 0 the batch runs without its own transaction, so no DB is
// needed; the server side is in timeouts_scratch_test.go.)
func TestPruneTableBatchTimeouts(t *testing.T) {
	t.Parallel()
	require.Equal(t, 3, prune.MaxConsecutiveTimeouts)

	tests := []struct {
		name        string
		batch       int
		reduced     int
		cycleCap    int64
		script      string
		wantLimits  []int32
		wantDeleted int64
		wantBatches int
		wantTimeout int
		wantReduced bool
		wantCapped  bool
		wantErr     error  // errors.Is target; nil: success
		wantCode    string // SQLSTATE the error wraps, if any
	}{
		{
			name: "TwoTimeoutsAreRiddenOut", batch: 100, script: "LL",
			wantLimits: repeat(3, 100), wantBatches: 1, wantTimeout: 2,
		},
		{
			name: "ThreeTimeoutsReduceTheBatchToATenth", batch: 100, script: "LLLFF",
			wantLimits:  concat(repeat(3, 100), repeat(3, 10)),
			wantDeleted: 20, wantBatches: 3, wantTimeout: 3, wantReduced: true,
		},
		{
			name: "StatementTimeoutsCountToo", batch: 100, script: "SLS",
			wantLimits: concat(repeat(3, 100), []int32{10}), wantBatches: 1, wantTimeout: 3, wantReduced: true,
		},
		{
			name: "SixTimeoutsGiveUpTheTable", batch: 100, script: "LLLLLL",
			wantLimits: concat(repeat(3, 100), repeat(3, 10)), wantTimeout: 6, wantReduced: true,
			wantErr: prune.ErrBatchTimeouts, wantCode: "55P03",
		},
		{
			name: "ASuccessResetsTheCount", batch: 100, script: "LLFLLF",
			wantLimits: repeat(7, 100), wantDeleted: 200, wantBatches: 3, wantTimeout: 4,
		},
		{
			// Once reduced, the next three in a row (even after successes)
			// give up: the table waits for the next cycle.
			name: "ReducedThenThreeMoreGiveUp", batch: 100, script: "LLLFLLL",
			wantLimits:  concat(repeat(3, 100), repeat(4, 10)),
			wantDeleted: 10, wantBatches: 1, wantTimeout: 6, wantReduced: true,
			wantErr: prune.ErrBatchTimeouts, wantCode: "55P03",
		},
		{
			name: "ExplicitReducedBatchSize", batch: 100, reduced: 7, script: "LLLF",
			wantLimits:  concat(repeat(3, 100), []int32{7, 7}),
			wantDeleted: 7, wantBatches: 2, wantTimeout: 3, wantReduced: true,
		},
		{
			name: "ReducedIsAtLeastOneRow", batch: 5, script: "LLL",
			wantLimits: concat(repeat(3, 5), []int32{1}), wantBatches: 1, wantTimeout: 3, wantReduced: true,
		},
		{
			name: "DefaultBatchSizeReducesTo500", batch: 0, script: "LLL",
			wantLimits:  concat(repeat(3, prune.DefaultBatchSize), []int32{prune.DefaultBatchSize / 10}),
			wantBatches: 1, wantTimeout: 3, wantReduced: true,
		},
		{
			name: "TheCapStillHolds", batch: 100, cycleCap: 25, script: "LLLFFF",
			wantLimits:  concat(repeat(3, 25), []int32{10, 10, 5}),
			wantDeleted: 25, wantBatches: 3, wantTimeout: 3, wantReduced: true, wantCapped: true,
		},
		{
			name: "OtherErrorsAreNotRetried", batch: 100, script: "LE",
			wantLimits: repeat(2, 100), wantTimeout: 1, wantCode: "42P01",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &scripted{script: []rune(tt.script)}
			rep, err := prune.PruneTable(context.Background(), nil, prune.Policy{
				Declaration: prune.Declaration{
					Table:       "t",
					DeleteBatch: s.deleteBatch,
				},
				Bounds: prune.Bounds{
					WindowDays:       30,
					BatchSize:        tt.batch,
					ReducedBatchSize: tt.reduced,
					CycleCap:         tt.cycleCap,
				},
			})
			switch {
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr)
				require.ErrorContains(t, err, "prune t")
			case tt.wantCode != "":
				require.Error(t, err)
				require.NotErrorIs(t, err, prune.ErrBatchTimeouts)
			default:
				require.NoError(t, err)
			}
			if tt.wantCode != "" {
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr, "the server's error stays inspectable")
				require.Equal(t, tt.wantCode, pgErr.Code)
			}
			require.Equal(t, tt.wantLimits, s.limits)
			require.Equal(t, tt.wantDeleted, rep.Deleted)
			require.Equal(t, tt.wantBatches, rep.Batches, "timed-out batches are not counted as batches")
			require.Equal(t, tt.wantTimeout, rep.Timeouts)
			require.Equal(t, tt.wantReduced, rep.Reduced)
			require.Equal(t, tt.wantCapped, rep.Capped)
		})
	}
}

// A statement cancelled because the caller's context ended (pgx sends a
// cancel request: SQLSTATE 57014 too) is a shutdown, not a timeout to retry.
func TestPruneTableCancellationIsNotATimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	rep, err := prune.PruneTable(ctx, nil, prune.Policy{
		Declaration: prune.Declaration{
			Table: "t",
			DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
				calls++
				cancel()
				return 0, &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"}
			},
		},
		Bounds: prune.Bounds{
			WindowDays: 30,
		},
	})
	require.Error(t, err)
	require.NotErrorIs(t, err, prune.ErrBatchTimeouts)
	require.Equal(t, 1, calls)
	require.Zero(t, rep.Timeouts)
}

func TestPruneTableWrappedTimeoutIsRecognised(t *testing.T) {
	t.Parallel()
	calls := 0
	rep, err := prune.PruneTable(context.Background(), nil, prune.Policy{
		Declaration: prune.Declaration{
			Table: "t",
			DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
				calls++
				if calls == 1 {
					// A generated query or a wrapper may wrap the server's error.
					return 0, errors.Join(errors.New("delete batch"), &pgconn.PgError{Code: "55P03"})
				}
				return 0, nil
			},
		},
		Bounds: prune.Bounds{
			WindowDays: 30,
			BatchSize:  10,
		},
	})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Timeouts)
	require.Equal(t, 2, calls)
}

func TestPolicyValidateTimeouts(t *testing.T) {
	t.Parallel()
	valid := prune.Policy{Declaration: prune.Declaration{Table: "t", DeleteBatch: noopBatch}, Bounds: prune.Bounds{WindowDays: 30, StatementTimeout: time.Second, LockTimeout: time.Second, ReducedBatchSize: 10}}
	require.NoError(t, valid.Validate())

	tests := []struct {
		name    string
		mutate  func(*prune.Policy)
		wantErr string
	}{
		{"NegativeStatementTimeout", func(p *prune.Policy) { p.StatementTimeout = -time.Millisecond }, "negative timeout"},
		{"NegativeLockTimeout", func(p *prune.Policy) { p.LockTimeout = -time.Millisecond }, "negative timeout"},
		{"NegativeReducedBatchSize", func(p *prune.Policy) { p.ReducedBatchSize = -1 }, "reduced batch size -1"},
		{"ReducedBatchSizeAboveMaxInt32", func(p *prune.Policy) { p.ReducedBatchSize = math.MaxInt32 + 1 }, "reduced batch size 2147483648"},
		{"NegativeYieldBatchSize", func(p *prune.Policy) { p.YieldBatchSize = -1 }, "yield batch size -1"},
		{"YieldBatchSizeAboveMaxInt32", func(p *prune.Policy) { p.YieldBatchSize = math.MaxInt32 + 1 }, "yield batch size 2147483648"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := valid
			tt.mutate(&p)
			err := p.Validate()
			require.ErrorIs(t, err, prune.ErrInvalidPolicy)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}
