package prune_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/prune"
)

// rowsDB is a prune.DB whose QueryRow answers from a script of row scanners
// and records every statement and its arguments. Any other use fails.
type rowsDB struct {
	t       *testing.T
	answers []func(dest ...any) error
	sqls    []string
	args    [][]any
	// allowTx lets Begin return a rowsTx; readOnly and rolledBack record
	// what was done with it.
	allowTx, readOnly, rolledBack bool
}

type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

func (d *rowsDB) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	d.sqls = append(d.sqls, sql)
	d.args = append(d.args, args)
	if len(d.answers) == 0 {
		d.t.Errorf("unexpected QueryRow %q", sql)
		return scanFunc(func(...any) error { return errors.New("rowsDB: no answer scripted") })
	}
	a := d.answers[0]
	d.answers = d.answers[1:]
	return scanFunc(a)
}

func (d *rowsDB) Begin(context.Context) (pgx.Tx, error) {
	if !d.allowTx {
		d.t.Errorf("unexpected Begin")
		return nil, errors.New("rowsDB: no Begin")
	}
	return &rowsTx{d: d}, nil
}

// rowsTx is the transaction of a rowsDB that allows one: its statements go
// to the rowsDB, except SET TRANSACTION, which it records.
type rowsTx struct {
	pgx.Tx // nil: any method not overridden panics
	d      *rowsDB
}

func (x *rowsTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if sql == "SET TRANSACTION READ ONLY" {
		x.d.readOnly = true
		return pgconn.NewCommandTag("SET"), nil
	}
	return x.d.Exec(ctx, sql, args...)
}

func (x *rowsTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return x.d.QueryRow(ctx, sql, args...)
}

func (x *rowsTx) Rollback(context.Context) error { x.d.rolledBack = true; return nil }

func (d *rowsDB) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	d.t.Errorf("unexpected Exec %q", sql)
	return pgconn.CommandTag{}, errors.New("rowsDB: no Exec")
}

func (d *rowsDB) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	d.t.Errorf("unexpected Query %q", sql)
	return nil, errors.New("rowsDB: no Query")
}

// countRow answers CountOlderThan's query: count and oldest age in seconds.
func countRow(count int64, oldest *float64) func(dest ...any) error {
	return func(dest ...any) error {
		*dest[0].(*int64) = count
		*dest[1].(**float64) = oldest
		return nil
	}
}

func ageRow(oldest *float64) func(dest ...any) error {
	return func(dest ...any) error {
		*dest[0].(**float64) = oldest
		return nil
	}
}

func inspectable(window, batch int, cycleCap int64) prune.Policy {
	return prune.Policy{
		Declaration: prune.Declaration{
			Table:       "event_outbox",
			AgeColumn:   "created_at",
			Eligible:    "published_at IS NOT NULL",
			DeleteBatch: noopBatch,
		},
		Bounds: prune.Bounds{
			WindowDays: window,
			BatchSize:  batch,
			CycleCap:   cycleCap,
		},
	}
}

func TestInspectable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*prune.Policy)
		wantErr error
	}{
		{"Valid", func(*prune.Policy) {}, nil},
		{"NoAgeColumn", func(p *prune.Policy) { p.AgeColumn = " " }, prune.ErrNotInspectable},
		{"NoPredicate", func(p *prune.Policy) { p.Eligible = "" }, prune.ErrNotInspectable},
		{"TwoStatements", func(p *prune.Policy) { p.Eligible = "TRUE; DELETE FROM event_outbox" }, prune.ErrInvalidPolicy},
		{"Parameter", func(p *prune.Policy) { p.Eligible = "created_at < $1" }, prune.ErrInvalidPolicy},
		{"InvalidPolicy", func(p *prune.Policy) { p.Table = "" }, prune.ErrInvalidPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := inspectable(30, 100, 0)
			tt.mutate(&p)
			err := p.Inspectable()
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)

			// No read-only query is built from such a policy.
			db := &rowsDB{t: t}
			_, err = prune.CountOlderThan(context.Background(), db, p, 30)
			require.ErrorIs(t, err, tt.wantErr)
			_, err = prune.OldestEligibleAge(context.Background(), db, p)
			require.ErrorIs(t, err, tt.wantErr)
			_, err = prune.ExplainSelection(context.Background(), db, p)
			require.ErrorIs(t, err, tt.wantErr)
			require.Empty(t, db.sqls)
		})
	}
}

func TestCountOlderThanQuery(t *testing.T) {
	t.Parallel()
	age := 40 * 86400.0
	db := &rowsDB{t: t, answers: []func(...any) error{countRow(3, &age)}}
	p := inspectable(30, 100, 0)
	p.Table, p.AgeColumn = `odd"table`, `odd"column`
	e, err := prune.CountOlderThan(context.Background(), db, p, 32)
	require.NoError(t, err)
	require.Equal(t, int64(3), e.Count)
	require.Equal(t, 40*24*time.Hour, *e.OldestAge)
	require.InDelta(t, age, *e.OldestAgeSeconds(), 0)

	// Identifiers quoted, the predicate verbatim, the days a bound int32.
	require.Len(t, db.sqls, 1)
	q := db.sqls[0]
	require.Contains(t, q, `FROM "odd""table" WHERE (published_at IS NOT NULL) AND "odd""column" < now() - make_interval(days => $1::int)`)
	require.Contains(t, q, `min("odd""column")`)
	require.Equal(t, []any{int32(32)}, db.args[0])

	db = &rowsDB{t: t, answers: []func(...any) error{countRow(0, nil)}}
	e, err = prune.CountOlderThan(context.Background(), db, p, 32)
	require.NoError(t, err)
	require.Zero(t, e.Count)
	require.Nil(t, e.OldestAge)
	require.Nil(t, e.OldestAgeSeconds())

	_, err = prune.CountOlderThan(context.Background(), &rowsDB{t: t}, p, 1<<40)
	require.ErrorIs(t, err, prune.ErrOutOfRange)
}

func TestOldestEligibleAge(t *testing.T) {
	t.Parallel()
	age := 31.5 * 86400
	db := &rowsDB{t: t, answers: []func(...any) error{ageRow(&age), ageRow(nil)}}
	p := inspectable(30, 100, 0)

	got, err := prune.OldestEligibleAge(context.Background(), db, p)
	require.NoError(t, err)
	require.Equal(t, time.Duration(age*float64(time.Second)), got)
	require.Equal(t, []any{int32(30)}, db.args[0], "the cutoff is the policy's window")

	got, err = prune.OldestEligibleAge(context.Background(), db, p)
	require.NoError(t, err)
	require.Zero(t, got, "nothing eligible is age 0")
}

// TestPlanBatchesMatchARealRun is the dry run's arithmetic: for every batch
// size, cap and eligible count, Plan's Batches and WouldCap are exactly what
// PruneTable then does on a table holding that many eligible rows.
func TestPlanBatchesMatchARealRun(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 3, 10, 100} {
		for _, cycleCap := range []int64{0, 1, 5, 10, 30, 250, 300} {
			for _, eligible := range []int64{0, 1, 2, 9, 10, 11, 29, 30, 31, 99, 100, 101, 249, 250, 251, 299, 300, 301, 1000} {
				name := fmt.Sprintf("batch%d/cap%d/eligible%d", batch, cycleCap, eligible)
				p := inspectable(30, batch, cycleCap)

				db := &rowsDB{t: t, answers: []func(...any) error{countRow(eligible, nil)}}
				plan, err := prune.Plan(context.Background(), db, p)
				require.NoError(t, err, name)
				require.Equal(t, eligible, plan.Count, name)

				ft := &fakeTable{eligible: eligible}
				p.DeleteBatch = ft.deleteBatch
				rep, err := prune.PruneTable(context.Background(), nil, p)
				require.NoError(t, err, name)

				require.Equal(t, int64(rep.Batches), plan.Batches, name)
				require.Equal(t, rep.Capped, plan.WouldCap, name)
			}
		}
	}
}

func TestPlanDisabledQueriesNothing(t *testing.T) {
	t.Parallel()
	db := &rowsDB{t: t}
	plan, err := prune.Plan(context.Background(), db, inspectable(0, 100, 0))
	require.NoError(t, err)
	require.Equal(t, prune.DryRun{}, plan)
	require.Empty(t, db.sqls)
}

// explainRow answers the EXPLAIN (FORMAT JSON) query with plan.
func explainRow(plan string) func(dest ...any) error {
	return func(dest ...any) error {
		*dest[0].(*[]byte) = []byte(plan)
		return nil
	}
}

func estimateRow(rows float64) func(dest ...any) error {
	return func(dest ...any) error {
		*dest[0].(*float64) = rows
		return nil
	}
}

// explainedDelete is a batch delete of one statement, as the local sweeps
// have: ExplainSelection must explain exactly it, with the batch's window
// and limit, and never run it.
const explainedDelete = `DELETE FROM event_outbox WHERE ctid = ANY (ARRAY(SELECT ctid FROM event_outbox WHERE created_at < now() - make_interval(days => $1::int) LIMIT $2::int))`

func explainedDeleteBatch(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
	tag, err := db.Exec(ctx, explainedDelete, p.WindowDays, p.Limit)
	return tag.RowsAffected(), err
}

func TestExplainSelection(t *testing.T) {
	t.Parallel()
	const (
		seqScan   = `[{"Plan": {"Node Type": "ModifyTable", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "event_outbox"}]}}]`
		indexScan = `[{"Plan": {"Node Type": "ModifyTable", "Plans": [{"Node Type": "Index Scan", "Index Name": "event_outbox_published_created_idx", "Relation Name": "event_outbox"}]}}]`
		otherSeq  = `[{"Plan": {"Node Type": "Nested Loop", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "other"}, {"Node Type": "Bitmap Heap Scan", "Relation Name": "event_outbox", "Plans": [{"Node Type": "Bitmap Index Scan", "Index Name": "i"}]}]}}]`
	)
	tests := []struct {
		name       string
		window     int
		plan       string
		wantSeq    bool
		wantPlan   string
		wantWindow int32
	}{
		{"SeqScan", 30, seqScan, true, "ModifyTable\n  Seq Scan on event_outbox\n", 30},
		{"IndexScan", 30, indexScan, false, "ModifyTable\n  Index Scan using event_outbox_published_created_idx on event_outbox\n", 30},
		{"SeqScanOfAnotherRelation", 30, otherSeq, false, "Nested Loop\n  Seq Scan on other\n  Bitmap Heap Scan on event_outbox\n    Bitmap Index Scan using i\n", 30},
		// A disabled sweep still has its shape checked, with any window.
		{"Disabled", 0, seqScan, true, "ModifyTable\n  Seq Scan on event_outbox\n", prune.MaxWindowDays},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := &rowsDB{t: t, allowTx: true, answers: []func(...any) error{explainRow(tt.plan), estimateRow(123456)}}
			p := inspectable(tt.window, 250, 0)
			p.DeleteBatch = explainedDeleteBatch
			pc, err := prune.ExplainSelection(context.Background(), db, p)
			require.NoError(t, err)
			require.Equal(t, tt.wantSeq, pc.SeqScan)
			require.Equal(t, tt.wantPlan, pc.Plan)
			require.InDelta(t, 123456, pc.TableRows, 0)

			require.Len(t, db.sqls, 2, "the DELETE is explained, never executed")
			require.Equal(t, "EXPLAIN (FORMAT JSON) "+explainedDelete, db.sqls[0], "the statement the sweep runs")
			require.Equal(t, []any{tt.wantWindow, int32(250)}, db.args[0], "the same window and LIMIT as a real batch")
			require.Equal(t, []any{`"event_outbox"`}, db.args[1])
			require.True(t, db.readOnly, "inside a read-only transaction")
			require.True(t, db.rolledBack)
		})
	}

	t.Run("UnreadablePlan", func(t *testing.T) {
		t.Parallel()
		db := &rowsDB{t: t, allowTx: true, answers: []func(...any) error{explainRow(`[]`)}}
		p := inspectable(30, 250, 0)
		p.DeleteBatch = explainedDeleteBatch
		_, err := prune.ExplainSelection(context.Background(), db, p)
		require.ErrorContains(t, err, "unreadable plan: no plan")
		require.NotContains(t, err.Error(), "%!w")
	})
}
