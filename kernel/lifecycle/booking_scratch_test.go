package lifecycle_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/prune"
)

// evaluationsSpec archives rule_evaluations with plain SQL (the kernel's
// tests cannot import the rules service's generated queries).
func evaluationsSpec() archive.TableSpec {
	sel := `SELECT t.id, t.evaluated_at, to_jsonb(t)::text FROM rule_evaluations AS t
WHERE t.evaluated_at < now() - make_interval(days => $1::int)
  AND (t.evaluated_at, t.id) > ($2::timestamptz, $3::uuid)
ORDER BY t.evaluated_at, t.id LIMIT $4::int`
	del := `DELETE FROM rule_evaluations WHERE id = ANY ($1::uuid[]) AND evaluated_at < now() - make_interval(days => $2::int)`
	return archive.TableSpec{Table: "rule_evaluations", AgeColumn: "evaluated_at",
		Select: func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
			rows, err := db.Query(ctx, sel, p.HotWindowDays, p.After.At, p.After.ID, p.Limit)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(r pgx.CollectableRow) (archive.Row, error) {
				var row archive.Row
				return row, r.Scan(&row.ID, &row.At, &row.Doc)
			})
		},
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			tag, err := tx.Exec(ctx, del, ids, hot)
			return tag.RowsAffected(), err
		}}
}

// TestHoldPlacedDuringABooking: a table hold placed
// while an archive pass is booking an archive it covers used to see neither
// the other (the booking read the committed holds, the hold's refresh the
// committed ledger): the archive was held by the purge predicate only, its
// objects unlocked, the fleet never told. Now the hold waits for the booking
// (lease.HoldsKey): the archive is held, locked and announced.
func TestHoldPlacedDuringABooking(t *testing.T) {
	t.Parallel()
	w := newWorldLocked(t, 0, true)
	w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output) VALUES (now() - interval '400 days', 'r', '{}', '{}')`)
	table := "rule_evaluations"
	mgr, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true, Tables: []string{table}}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	placed := make(chan uuid.UUID, 1)
	bk := archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules",
		Also: func(context.Context, pgx.Tx, archive.ArchivedEvent) error {
			go func() { // another operator, while this booking is in flight
				h, err := mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "subpoena", Reason: "court", Table: &table}, "ops:carol")
				if err != nil {
					t.Errorf("place hold: %v", err)
				}
				placed <- h.ID
			}()
			waitForLockWait(t, w) // the hold waits for this booking
			return nil
		}}
	am, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	eng, err := archive.New(w.db.Pool, w.st, []archive.TableSpec{evaluationsSpec()}, bk.Bookkeep,
		archive.Config{Service: w.s3.Service, HotWindowDays: 90, BatchSize: 100, MaxBatchBytes: archive.DefaultMaxBatchBytes, LedgerHolds: true, ObjectLock: true},
		slog.New(&kerneltest.LogRecorder{}), am)
	require.NoError(t, err)
	_, err = eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	var hold uuid.UUID
	select {
	case hold = <-placed:
	case <-time.After(time.Minute):
		t.Fatal("the hold was never placed")
	}
	var id uuid.UUID
	var dataKey, manifestKey string
	var held bool
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT archive_id, data_key, manifest_key, legal_hold FROM archive_ledger`).Scan(&id, &dataKey, &manifestKey, &held))
	require.True(t, held, "the ledger holds it")
	for _, key := range []string{dataKey, manifestKey} {
		on, err := w.st.LegalHold(w.ctx, key)
		require.NoError(t, err)
		require.True(t, on, "%s is under the store's legal hold", key)
	}
	require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type LIKE '%.archive_hold_placed' AND payload -> 'legal_hold' ->> $1 = 'true'`, id.String()),
		"the fleet is told")
	_, err = mgr.ReleaseHold(w.ctx, hold, "done", "ops:carol")
	require.NoError(t, err)
	_, _ = w.st.DestroyReleased(context.Background(), dataKey)
	_, _ = w.st.DestroyReleased(context.Background(), manifestKey)
}
