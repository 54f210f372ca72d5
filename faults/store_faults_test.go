//go:build faults

package faults_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
)

// storeRequestTimeout bounds each store request of the faulty store (a
// hang must end in this, not in the default minute).
const storeRequestTimeout = time.Second

// TestStoreFaults: an archive pass through a proxy that injects each fault
// kind into the store's object requests (after a seeded-random number of
// good ones): a failing kind stops the table with a store error and
// deletes nothing without its objects; latency and a slow body only slow
// it; the lease is released; the next pass (faults off) succeeds; a read
// by id through the faulty store fails or serves the exact row, never
// another.
func TestStoreFaults(t *testing.T) {
	t.Parallel()
	n := rounds(t)
	for _, kind := range []string{faults.Fault500, faults.Fault503, faults.Fault412, faults.FaultLatency, faults.FaultReset, faults.FaultHang, faults.FaultSlowBody} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			w := newRulesWorld(t)
			proxy, err := faults.NewStoreProxy(s3Endpoint(t))
			require.NoError(t, err)
			t.Cleanup(func() { _ = proxy.Close() })
			ctx := context.Background()
			faulty, err := store.Open(ctx, w.bucket.URL(proxy.URL), store.WithRequestTimeout(storeRequestTimeout))
			require.NoError(t, err)
			t.Cleanup(func() { _ = faulty.Close() })
			eng := faultyEngine(t, w, faulty)
			reader := archiveread.New(w.Pool, faulty, rules.Name, rules.ArchiveTables())
			tl := newTally("store_faults", kind)
			rng := rand.New(rand.NewPCG(14, uint64(len(kind))))
			failing := kind != faults.FaultLatency && kind != faults.FaultSlowBody
			for round := range n {
				if w.aged(t) < 500 { // the faulty pass's 4 batches and the next pass's one
					w.seed(t, 600, 10)
				}
				before := proxy.Injected()
				proxy.Set(kind, rng.IntN(6))
				rep, err := eng.RunPass(ctx, 4)
				require.NoError(t, err, "round %d", round)
				injected := proxy.Injected() - before
				tl.Rounds++
				tl.Faults[kind] += int(injected)
				tr := rep.Tables[0]
				if failing && injected > 0 {
					require.NotNil(t, tr.Err, "round %d: %d faults injected, the table must stop", round, injected)
					require.ErrorIs(t, tr.Err, archive.ErrStore, "round %d", round)
				}
				if !failing {
					require.NoError(t, tr.Err, "round %d: %s only slows the pass", round, kind)
				}
				w.readUnderFaults(t, reader, rng, tl)
				check(t, w.World, tl, faults.CheckOptions{})

				proxy.Set(faults.FaultNone, 0)
				rep, err = eng.RunPass(ctx, 1)
				require.NoError(t, err)
				require.NoError(t, rep.Tables[0].Err, "round %d: the next pass succeeds", round)
				require.Positive(t, rep.Tables[0].Archived, "round %d", round)
				check(t, w.World, tl, faults.CheckOptions{})
			}
			tl.write(t)
		})
	}
}

// engineDBTimeout is the suite engines' archive.db_timeout: short, so a
// frozen database ends a pass in seconds.
const engineDBTimeout = 2 * time.Second

func faultyEngine(t *testing.T, w *rulesWorld, st *store.Store) *archive.Engine {
	t.Helper()
	m, err := metrics.NewArchive(prometheus.NewRegistry())
	require.NoError(t, err)
	// As serve's: the kernel's ledger (holds, the subject index) with the
	// world's subject key.
	eng, err := archive.New(w.Pool, st, rules.ArchiveTables(), rules.Bookkeep, archive.Config{Service: rules.Name, HotWindowDays: 90,
		BatchSize: 100, MaxBatchBytes: archive.DefaultSettings().MaxBatchBytes, DBTimeout: engineDBTimeout,
		LedgerHolds: true, SubjectKey: w.SubjectKey}, slog.New(slog.NewTextHandler(io.Discard, nil)), m)
	require.NoError(t, err)
	return eng
}

// readUnderFaults reads a few archived rows through the faulty store: each
// read fails or answers exactly the seeded row.
func (w *rulesWorld) readUnderFaults(t *testing.T, r *archiveread.Reader, rng *rand.Rand, tl *tally) {
	t.Helper()
	ids := w.archivedIDs(t, 3, rng)
	for _, id := range ids {
		f, err := r.Row(context.Background(), rules.EvaluationsTable, id, "ops:faults")
		tl.Checks++
		if err != nil {
			require.False(t, errors.Is(err, archiveread.ErrNotFound), "an archived row is never reported missing because the store failed: %v", err)
			continue
		}
		require.JSONEq(t, w.Aged[id], string(f.Row), "a read serves exactly the archived row")
	}
}

// archivedIDs picks up to n seeded rows no longer in the table.
func (w *rulesWorld) archivedIDs(t *testing.T, n int, rng *rand.Rand) []uuid.UUID {
	t.Helper()
	rows, err := w.Pool.Query(context.Background(), `SELECT first_record_id FROM archive_ledger WHERE purged_at IS NULL ORDER BY archive_id`)
	require.NoError(t, err)
	defer rows.Close()
	var all []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		all = append(all, id)
	}
	require.NoError(t, rows.Err())
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}
