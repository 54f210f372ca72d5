package archivetest

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
)

// otherTable is the second archived table of the isolation tests: the
// suite's own, created in the harness's database.
const (
	otherTable = "archivetest_items"
	otherDDL   = `CREATE TABLE archivetest_items (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL,
    note       text        NOT NULL)`
	otherSeed = `INSERT INTO archivetest_items (created_at, note)
    SELECT now() - interval '100 days' - make_interval(mins => g), 'n' || g FROM generate_series(1, 6) g`
)

// otherSpec archives archivetest_items, or fails its selection.
func otherSpec(failSelect bool) archive.TableSpec {
	return archive.TableSpec{
		Table:     otherTable,
		AgeColumn: "created_at",
		Select: func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
			if failSelect {
				return nil, errors.New("injected: archivetest_items selection fails")
			}
			rows, err := db.Query(ctx, `SELECT t.id, t.created_at, to_jsonb(t)::text FROM archivetest_items AS t
				WHERE t.created_at < now() - make_interval(days => $1::int) AND (t.created_at, t.id) > ($2::text::timestamptz, $3::uuid)
				ORDER BY t.created_at, t.id LIMIT $4::int`, p.HotWindowDays, p.After.Key, p.After.ID, p.Limit)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(r pgx.CollectableRow) (archive.Row, error) {
				var row archive.Row
				return row, r.Scan(&row.ID, &row.At, &row.Doc)
			})
		},
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			tag, err := tx.Exec(ctx, `DELETE FROM archivetest_items WHERE id = ANY ($1::uuid[]) AND created_at < now() - make_interval(days => $2::int)`, ids, hot)
			return tag.RowsAffected(), err
		},
	}
}

// testQuarantine: a single row larger than max_batch_bytes is
// quarantined (counted, metered, WARNed, kept) while the pass archives the
// others, and a second table is unaffected; a failing second table does not
// stop the table under test either.
func testQuarantine(t *testing.T, s suite) {
	const maxBytes = 8192
	tests := []struct {
		name            string
		oversize        bool
		failOther       bool
		wantQuarantined int
		wantOther       int64
	}{
		{name: "oversize row quarantined", oversize: true, wantQuarantined: 1, wantOther: 6},
		{name: "failing second table isolated", failOther: true},
		{name: "both", oversize: true, failOther: true, wantQuarantined: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := s.env(t)
			e.exec(t, otherDDL)
			e.exec(t, otherSeed)
			normal := append(e.seed(t, 1, 6, 100, 0), e.seed(t, 7, 12, 100, 0)...)
			var big uuid.UUID
			if tt.oversize {
				big = e.seed(t, 6, 7, 100, maxBytes)[0] // between the others in age
			}
			eng := e.engine(t, []archive.TableSpec{e.table.Spec, otherSpec(tt.failOther)}, nil,
				func(c *archive.Config) { c.MaxBatchBytes = maxBytes; c.BatchSize = 4 })

			rep, err := eng.RunPass(e.ctx, 50)
			require.NoError(t, err)
			require.False(t, rep.More)
			mine, other := rep.Tables[0], rep.Tables[1]
			require.NoError(t, mine.Err, "the table archives despite the other table and the poison row")
			require.Equal(t, tt.wantQuarantined, mine.Quarantined)
			require.Equal(t, int64(len(normal)), mine.Archived)
			require.Equal(t, float64(tt.wantQuarantined), testutil.ToFloat64(e.m.Quarantined.WithLabelValues(e.table.Spec.Table)))
			require.Zero(t, testutil.ToFloat64(e.m.Quarantined.WithLabelValues(otherTable)))
			require.ElementsMatch(t, normal, e.archivedIDs(t, mine))
			checkOther(t, e, rep, other, tt.failOther, tt.wantOther)
			if !tt.oversize {
				require.Empty(t, e.h.Logs.Entries(slog.LevelWarn, "quarantined"))
				require.Zero(t, e.rows(t, "true"))
				return
			}
			checkPoisonRow(t, e, eng, big, maxBytes)
		})
	}
}

// checkOther: the second table archived everything, or failed alone with
// archive.ErrDB and kept its rows.
func checkOther(t *testing.T, e *env, rep archive.PassReport, other archive.TableReport, failed bool, want int64) {
	t.Helper()
	require.Zero(t, other.Quarantined)
	require.Equal(t, want, other.Archived)
	if failed {
		require.ErrorIs(t, other.Err, archive.ErrDB)
		require.NotNil(t, other.Error)
		require.Equal(t, int64(6), e.count(t, `SELECT count(*) FROM archivetest_items`))
		require.ErrorIs(t, rep.Err(), archive.ErrDB)
		return
	}
	require.NoError(t, other.Err)
	require.Nil(t, other.Error)
	require.Zero(t, e.count(t, `SELECT count(*) FROM archivetest_items`))
	require.Equal(t, int64(6), e.count(t, `SELECT sum(record_count) FROM archive_ledger WHERE table_name = $1`, otherTable))
}

// checkPoisonRow: the oversize row was WARNed once with its id and sizes,
// stays for an operator, and the next pass quarantines it again and
// archives nothing else.
func checkPoisonRow(t *testing.T, e *env, eng *archive.Engine, big uuid.UUID, maxBytes int64) {
	t.Helper()
	warns := e.h.Logs.Entries(slog.LevelWarn, "quarantined")
	require.Len(t, warns, 1)
	require.Equal(t, e.table.Spec.Table, warns[0]["table"])
	require.Equal(t, big.String(), warns[0]["id"])
	require.Greater(t, warns[0]["row_bytes"].(int64), maxBytes)
	require.Equal(t, maxBytes, warns[0]["max_batch_bytes"])
	require.Equal(t, int64(1), e.rows(t, "true"))
	require.Equal(t, int64(1), e.rows(t, "t.id = $1", big), "the poison row stays, for an operator")

	rep, err := eng.RunPass(e.ctx, 50)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Tables[0].Quarantined)
	require.Zero(t, rep.Tables[0].Archived)
	require.False(t, rep.More)
}

// faultyDelete wraps the table's delete: armed, it deletes one row fewer
// than it was given (a count mismatch) or fails outright.
func faultyDelete(inner archive.DeleteFunc, armed *atomic.Bool, fail bool) archive.DeleteFunc {
	return func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
		if !armed.CompareAndSwap(true, false) {
			return inner(ctx, tx, hot, ids)
		}
		if fail {
			return 0, errors.New("injected: delete failed")
		}
		return inner(ctx, tx, hot, ids[1:])
	}
}

// crashAfterBookkeep runs the table's bookkeeping, then (once, armed)
// "crashes": the error rolls the transaction back.
func crashAfterBookkeep(bk archive.Bookkeeper, armed *atomic.Bool) archive.BookkeepFunc {
	return func(ctx context.Context, tx pgx.Tx, m archive.Manifest, by string) error {
		if err := bk.Bookkeep(ctx, tx, m, by); err != nil {
			return err
		}
		if armed.CompareAndSwap(true, false) {
			return errors.New("injected: crash after the ledger insert")
		}
		return nil
	}
}
