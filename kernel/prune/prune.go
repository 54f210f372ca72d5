// Package prune is the one batch loop every swept table goes through.
//
// A Policy names a table, its retention window and its batch delete (a
// sqlc-generated :execrows query that deletes at most `limit` eligible rows,
// computes its cutoff with the database clock and repeats the eligibility
// predicate in the outer DELETE). PruneTable runs that delete in batches until
// a short batch, never deleting more than the cycle cap in one call.
package prune

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// DefaultBatchSize bounds the rows one DELETE removes, so the lock and WAL
	// footprint of each statement stays small and the outbox drain can
	// interleave with a large first backlog (seed 000, PRUNE_BATCH).
	DefaultBatchSize = 5_000

	// DefaultCycleCap is the anomaly guard: a cycle that would delete more than
	// this stops and warns rather than trust a clock that may have jumped
	// (NTP glitch, VM migration: now() - 30 d could then match everything).
	DefaultCycleCap int64 = 1_000_000

	// MaxWindowDays is the longest retention window accepted (ten years); a
	// larger value is a typo, not a policy.
	MaxWindowDays = 3650
)

// DB is what a batch delete runs on: a *pgx.Conn, a pgx.Tx or a pool. Its
// method set matches the DBTX interface sqlc generates, so a generated query
// constructor accepts it unchanged.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// BatchParams are the bound parameters of one batch delete. Both come from
// validated integers through checked conversions; neither is ever text.
type BatchParams struct {
	// WindowDays is the retention window: rows older than
	// now() - make_interval(days => WindowDays) are eligible.
	WindowDays int32
	// Limit is the most rows the statement may delete.
	Limit int32
}

// DeleteBatchFunc runs one batch delete and returns the rows it deleted.
type DeleteBatchFunc func(ctx context.Context, db DB, p BatchParams) (int64, error)

// Policy is one swept table.
type Policy struct {
	// Table is the table name; it is also the metric and report label.
	Table string
	// WindowDays is the retention window in days; 0 disables the sweep of
	// this table (and only this table).
	WindowDays int
	// BatchSize is the most rows one DELETE removes; 0 means DefaultBatchSize.
	BatchSize int
	// CycleCap is the most rows one PruneTable call deletes; 0 means
	// DefaultCycleCap.
	CycleCap int64
	// DeleteBatch is the table's batch delete.
	DeleteBatch DeleteBatchFunc
}

// Report is the outcome of one PruneTable call.
type Report struct {
	// Table is the policy's table.
	Table string
	// Disabled is true when the window is 0 and nothing was attempted.
	Disabled bool
	// Deleted is the exact number of rows deleted.
	Deleted int64
	// Batches is the number of DELETE statements run.
	Batches int
	// Capped is true when the cycle cap stopped the loop while rows may
	// remain: a possible anomaly that callers must warn about.
	Capped bool
	// Duration is the wall time spent.
	Duration time.Duration
}

// ErrInvalidPolicy is returned (wrapped) for a policy that cannot run.
var ErrInvalidPolicy = errors.New("prune: invalid policy")

// Validate checks the policy's fields and bounds.
func (p Policy) Validate() error {
	switch {
	case p.Table == "":
		return fmt.Errorf("%w: empty table name", ErrInvalidPolicy)
	case p.DeleteBatch == nil:
		return fmt.Errorf("%w: %s: no batch delete", ErrInvalidPolicy, p.Table)
	case p.WindowDays < 0 || p.WindowDays > MaxWindowDays:
		return fmt.Errorf("%w: %s: window %d days outside 0..%d", ErrInvalidPolicy, p.Table, p.WindowDays, MaxWindowDays)
	case p.BatchSize < 0 || p.BatchSize > math.MaxInt32:
		return fmt.Errorf("%w: %s: batch size %d outside 0..%d", ErrInvalidPolicy, p.Table, p.BatchSize, math.MaxInt32)
	case p.CycleCap < 0:
		return fmt.Errorf("%w: %s: negative cycle cap %d", ErrInvalidPolicy, p.Table, p.CycleCap)
	}
	return nil
}

func (p Policy) batchSize() int64 {
	if p.BatchSize == 0 {
		return DefaultBatchSize
	}
	return int64(p.BatchSize)
}

func (p Policy) cycleCap() int64 {
	if p.CycleCap == 0 {
		return DefaultCycleCap
	}
	return p.CycleCap
}

// PruneTable deletes the policy's eligible rows in batches on db, until a
// batch comes back short (nothing left) or the next batch could pass the cycle
// cap. It checks ctx between batches, so cancellation stops it within one
// statement. The count in the report is exact: the sum of rows affected.
func PruneTable(ctx context.Context, db DB, p Policy) (rep Report, err error) {
	start := time.Now()
	rep.Table = p.Table
	defer func() { rep.Duration = time.Since(start) }()
	if err := p.Validate(); err != nil {
		return rep, err
	}
	if p.WindowDays == 0 {
		rep.Disabled = true
		return rep, nil
	}
	window, err := toInt32(int64(p.WindowDays))
	if err != nil {
		return rep, fmt.Errorf("prune %s: window: %w", p.Table, err)
	}
	batch, capRows := p.batchSize(), p.cycleCap()
	for {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("prune %s: %w", p.Table, err)
		}
		remaining := capRows - rep.Deleted
		if remaining <= 0 {
			// The previous batch was full and the cap is reached: rows may
			// remain, and deleting them is for the next cycle (or a human).
			rep.Capped = true
			return rep, nil
		}
		limit64 := min(batch, remaining)
		limit, err := toInt32(limit64)
		if err != nil {
			return rep, fmt.Errorf("prune %s: limit: %w", p.Table, err)
		}
		n, err := p.DeleteBatch(ctx, db, BatchParams{WindowDays: window, Limit: limit})
		if err != nil {
			return rep, fmt.Errorf("prune %s: batch %d: %w", p.Table, rep.Batches+1, err)
		}
		rep.Batches++
		rep.Deleted += n
		if n < limit64 {
			return rep, nil // short batch: nothing eligible is left
		}
	}
}

// ErrOutOfRange is returned (wrapped) when a value does not fit the type a
// query binds it as.
var ErrOutOfRange = errors.New("value out of range")

func toInt32(v int64) (int32, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %d does not fit int32", ErrOutOfRange, v)
	}
	return int32(v), nil
}
