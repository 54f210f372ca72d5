package lifecycle_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lifecycle"
)

// disagreeing lists the ledger rows whose legal_hold is not archive_is_held.
func disagreeing(t *testing.T, w *world) []string {
	t.Helper()
	rows, err := w.db.Pool.Query(w.ctx, `SELECT archive_id::text || ' legal_hold=' || legal_hold::text FROM archive_ledger
		WHERE legal_hold IS DISTINCT FROM archive_is_held(archive_id, table_name, first_record_at, last_record_at) ORDER BY archive_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// TestHostileConcurrentReconcilesToggleLegalHold: two replicas' ReconcileLocks
// (no advisory lock) run RefreshLegalHolds at once over a drifted ledger row
// (legal_hold false although an active hold covers it; e.g. left by
// SyncSubjectDeclarations' UnindexTable under a subject hold). Both
// statements compute the same "flip" set from their snapshots; the second
// one, re-checked after the first commits, flips the row back
// (SET legal_hold = NOT legal_hold). The old query (SET legal_hold =
// archive_is_held(...) WHERE IS DISTINCT FROM) was idempotent.
func TestHostileConcurrentReconcilesToggleLegalHold(t *testing.T) {
	w := newWorldLocked(t, 0, false)
	x := w.archived(t, 400, "CURRENT_DATE - 1")
	_, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{x.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	// The drift ReconcileLocks exists to repair.
	w.db.Exec(t, `UPDATE archive_ledger SET legal_hold = false WHERE archive_id = $1`, x.ArchiveID)
	require.Len(t, disagreeing(t, w), 1)

	locking, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, key := range []string{x.DataKey, x.ManifestKey} {
			_ = w.st.SetLegalHold(context.Background(), key, false)
		}
	})
	// Another session holds the row a moment, so both replicas' refreshes
	// read the same snapshot before either updates.
	blocker, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = blocker.Rollback(context.Background()) })
	_, err = blocker.Exec(w.ctx, `SELECT 1 FROM archive_ledger WHERE archive_id = $1 FOR UPDATE`, x.ArchiveID)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = locking.ReconcileLocks(w.ctx)
		}()
	}
	require.Eventually(t, func() bool {
		return w.db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) >= 2
	}, time.Minute, 10*time.Millisecond, "both refreshes wait on the row")
	require.NoError(t, blocker.Commit(w.ctx))
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Empty(t, disagreeing(t, w), "after two reconciles legal_hold equals archive_is_held")
}

// TestHostilePlaceHoldRacingReconcileToggles: the same with a hold placed on
// another archive (PlaceHold takes the advisory lock, ReconcileLocks does
// not): the drifted row is flipped by both.
func TestHostilePlaceHoldRacingReconcileToggles(t *testing.T) {
	w := newWorldLocked(t, 0, false)
	x, y := w.archived(t, 400, "CURRENT_DATE - 1"), w.archived(t, 400, "CURRENT_DATE - 1")
	_, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", ArchiveIDs: []uuid.UUID{x.ArchiveID}}, "ops:carol")
	require.NoError(t, err)
	w.db.Exec(t, `UPDATE archive_ledger SET legal_hold = false WHERE archive_id = $1`, x.ArchiveID)

	locking, err := lifecycle.New(w.db.Pool, w.st, lifecycle.Config{Service: w.s3.Service, ObjectLock: true}, slog.New(&kerneltest.LogRecorder{}), w.m)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, key := range []string{x.DataKey, x.ManifestKey} {
			_ = w.st.SetLegalHold(context.Background(), key, false)
		}
	})
	blocker, err := w.db.Pool.Begin(w.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = blocker.Rollback(context.Background()) })
	_, err = blocker.Exec(w.ctx, `SELECT 1 FROM archive_ledger WHERE archive_id = $1 FOR UPDATE`, x.ArchiveID)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var e1, e2 error
	wg.Add(2)
	go func() { defer wg.Done(); _, e1 = locking.ReconcileLocks(w.ctx) }()
	go func() {
		defer wg.Done()
		_, e2 = w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t2", Reason: "r2", ArchiveIDs: []uuid.UUID{y.ArchiveID}}, "ops:carol")
	}()
	require.Eventually(t, func() bool {
		return w.db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) >= 2
	}, time.Minute, 10*time.Millisecond, "both refreshes wait on the row")
	require.NoError(t, blocker.Commit(w.ctx))
	wg.Wait()
	require.NoError(t, e1)
	require.NoError(t, e2)
	require.Empty(t, disagreeing(t, w), "legal_hold equals archive_is_held")
}

// TestHostileRefreshMatchesArchiveIsHeld: a seeded random ledger (archives
// of two tables, indexed or not, purged or not, under random subject
// hashes, legal_hold drifted at random) and random active and released
// holds of every kind (ids, tables with open and closed ranges on exact
// boundaries, subjects, sealed subjects): RefreshLegalHolds returns exactly
// the rows whose legal_hold differed from archive_is_held and leaves
// legal_hold equal to it on every row, under an odd session time zone and
// DateStyle.
func TestHostileRefreshMatchesArchiveIsHeld(t *testing.T) {
	w := newWorld(t, 0)
	seed := w.archived(t, 400, "NULL")
	base := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	hash := func(i int) []byte { b := make([]byte, 32); b[0] = byte(i); return b }
	for round := range 12 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(round), 45))
			w.db.Exec(t, `DELETE FROM archive_holds`)
			w.db.Exec(t, `DELETE FROM subject_seals`)
			w.db.Exec(t, `DELETE FROM archive_subjects WHERE archive_id <> $1`, seed.ArchiveID)
			w.db.Exec(t, `DELETE FROM archive_ledger WHERE archive_id <> $1`, seed.ArchiveID)
			var ids []uuid.UUID
			var firsts, lasts []time.Time
			for range 40 + r.IntN(40) {
				id := uuid.Must(uuid.NewV7())
				first := base.Add(time.Duration(r.IntN(20)) * time.Hour)
				last := first.Add(time.Duration(r.IntN(5)) * time.Hour)
				tbl := []string{"rule_evaluations", "other_table"}[r.IntN(2)]
				purged := r.IntN(5) == 0
				w.db.Exec(t, `INSERT INTO archive_ledger SELECT (jsonb_populate_record(NULL::archive_ledger, to_jsonb(l) || jsonb_build_object(
						'archive_id', $2::uuid, 'table_name', $3::text, 'data_key', 'k/'||$2::text||'.ndjson', 'manifest_key', 'k/'||$2::text||'.manifest.json',
						'first_record_at', $4::timestamptz, 'last_record_at', $5::timestamptz, 'legal_hold', $6::boolean,
						'subjects_indexed', $7::boolean, 'purged_at', CASE WHEN $8::boolean THEN now() END))).*
					FROM archive_ledger AS l WHERE l.archive_id = $1`,
					seed.ArchiveID, id, tbl, first, last, r.IntN(2) == 0, r.IntN(4) != 0, purged)
				if r.IntN(3) != 0 {
					var hs [][]byte
					for range 1 + r.IntN(3) {
						hs = append(hs, hash(r.IntN(6)))
					}
					w.db.Exec(t, `INSERT INTO archive_subjects (archive_id, subject_hashes) VALUES ($1, $2)`, id, hs)
				}
				ids, firsts, lasts = append(ids, id), append(firsts, first), append(lasts, last)
			}
			for range r.IntN(3) {
				w.db.Exec(t, `INSERT INTO subject_seals (subject_hash, order_ref, reason, sealed_by) VALUES ($1, 'o', 'r', 'x') ON CONFLICT DO NOTHING`, hash(r.IntN(6)))
			}
			for range 1 + r.IntN(5) {
				var tbl *string
				var from, to *time.Time
				var aids []uuid.UUID
				var hs [][]byte
				switch r.IntN(3) {
				case 0:
					for range 1 + r.IntN(3) {
						aids = append(aids, ids[r.IntN(len(ids))])
					}
					if r.IntN(4) == 0 {
						aids = append(aids, uuid.Must(uuid.NewV7())) // unknown id
					}
				case 1:
					s := []string{"rule_evaluations", "other_table", "nobody"}[r.IntN(3)]
					tbl = &s
					i := r.IntN(len(ids))
					switch r.IntN(4) {
					case 0: // from == last_record_at of one archive
						from = &lasts[i]
					case 1: // to == first_record_at of one archive
						to = &firsts[i]
					case 2:
						f, tt := lasts[i], firsts[r.IntN(len(ids))]
						if f.Before(tt) {
							from, to = &f, &tt
						}
					}
				case 2:
					for range 1 + r.IntN(2) {
						hs = append(hs, hash(r.IntN(7)))
					}
				}
				if aids == nil {
					aids = []uuid.UUID{}
				}
				if hs == nil {
					hs = [][]byte{}
				}
				if tbl == nil && len(aids) == 0 && len(hs) == 0 {
					continue
				}
				released := r.IntN(3) == 0
				w.db.Exec(t, `INSERT INTO archive_holds (title, reason, table_name, from_at, to_at, archive_ids, subject_hashes, created_by, released_at, released_by, release_reason)
					VALUES ('t', 'r', $1, $2, $3, $4, $5, 'x', CASE WHEN $6::boolean THEN now() END, CASE WHEN $6::boolean THEN 'x' END, CASE WHEN $6::boolean THEN 'x' END)`,
					tbl, from, to, aids, hs, released)
			}
			var want []string
			rows, err := w.db.Pool.Query(w.ctx, `SELECT archive_id::text FROM archive_ledger
				WHERE legal_hold IS DISTINCT FROM archive_is_held(archive_id, table_name, first_record_at, last_record_at) ORDER BY 1`)
			require.NoError(t, err)
			want, err = pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			var got []string
			require.NoError(t, pgx.BeginFunc(w.ctx, w.db.Pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(w.ctx, `SET LOCAL TimeZone = 'Pacific/Kiritimati'; SET LOCAL DateStyle = 'SQL, DMY'`); err != nil {
					return err
				}
				res, err := queries.New(tx).RefreshLegalHolds(w.ctx)
				for _, x := range res {
					got = append(got, uuid.UUID(x.ArchiveID.Bytes).String())
				}
				return err
			}))
			slices.Sort(got)
			require.Equal(t, want, got, "the refresh returns exactly the rows that changed")
			require.Empty(t, disagreeing(t, w))

			// Each hold's covers are the second version's (every ledger row
			// read), for every hold and for the hold read alone.
			holds, err := w.mgr.Holds(w.ctx)
			require.NoError(t, err)
			for _, h := range holds {
				rows, err := w.db.Pool.Query(w.ctx, `SELECT l.archive_id FROM archive_holds AS h, archive_ledger AS l WHERE h.id = $1 AND (
					l.archive_id = ANY (h.archive_ids)
					OR (h.table_name = l.table_name AND (h.from_at IS NULL OR l.last_record_at >= h.from_at) AND (h.to_at IS NULL OR l.first_record_at < h.to_at))
					OR (cardinality(h.subject_hashes) > 0 AND (NOT l.subjects_indexed OR EXISTS (SELECT 1 FROM archive_subjects AS s WHERE s.archive_id = l.archive_id
						AND s.subject_hashes && ARRAY(SELECT x FROM unnest(h.subject_hashes) AS x EXCEPT SELECT subject_hash FROM subject_seals)))))
					ORDER BY l.archive_id`, h.ID)
				require.NoError(t, err)
				wantCovers, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
				require.NoError(t, err)
				if wantCovers == nil {
					wantCovers = []uuid.UUID{}
				}
				gotCovers := h.Covers
				if gotCovers == nil {
					gotCovers = []uuid.UUID{}
				}
				require.Equal(t, wantCovers, gotCovers, "hold %s covers", h.ID)
			}

			// The purge's dry run: every due, unheld, unpurged archive, oldest first.
			w.db.Exec(t, `UPDATE archive_ledger SET retention_until = CURRENT_DATE - (random() * 3)::int + 1, archived_at = archived_at - (random() * 1000)::int * interval '1 second'`)
			res, err := w.mgr.Purge(w.ctx, 100, true, "ops:alice")
			require.NoError(t, err)
			rows, err = w.db.Pool.Query(w.ctx, `SELECT archive_id FROM archive_ledger WHERE purged_at IS NULL AND retention_until <= (now() AT TIME ZONE 'UTC')::date
				AND NOT legal_hold AND NOT archive_is_held(archive_id, table_name, first_record_at, last_record_at) ORDER BY retention_until, archived_at, archive_id`)
			require.NoError(t, err)
			due, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			require.NoError(t, err)
			require.Equal(t, due, res.Candidates, "dry run lists exactly the due archives in order")
		})
	}
}
