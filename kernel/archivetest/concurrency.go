package archivetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
)

// testOnePass: while one pass holds the archive lease, a
// second (and another replica's engine) gets ErrAlreadyRunning and touches
// nothing; the lease is free again once the first ends.
func testOnePass(t *testing.T, s suite) {
	e := s.env(t)
	e.seed(t, 1, 21, 100, 0)
	spec := e.table.Spec
	inner := spec.Select
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	spec.Select = func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return inner(ctx, db, p)
	}
	eng := e.engine(t, []archive.TableSpec{spec}, nil, nil)

	type result struct {
		rep archive.PassReport
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		rep, err := eng.RunPass(e.ctx, 5)
		firstDone <- result{rep, err}
	}()
	select {
	case <-entered:
	case <-e.ctx.Done():
		t.Fatal("the first pass never selected")
	}

	rep, err := eng.RunPass(e.ctx, 5)
	require.ErrorIs(t, err, archive.ErrAlreadyRunning)
	var ae *archive.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, archive.ErrAlreadyRunning, ae.Kind)
	require.Zero(t, rep.Tables[0].Archived)
	require.False(t, rep.More)
	_, err = e.engine(t, nil, nil, nil).RunPass(e.ctx, 5)
	require.ErrorIs(t, err, archive.ErrAlreadyRunning, "another replica's engine is fenced too")
	require.Equal(t, int64(20), e.rows(t, "true"))
	require.Empty(t, e.ledger(t))

	close(release)
	first := <-firstDone
	require.NoError(t, first.err)
	require.NoError(t, first.rep.Err())
	require.Equal(t, int64(20), first.rep.Tables[0].Archived)

	rep = e.pass(t, eng, 5)
	require.Zero(t, rep.Tables[0].Archived, "the lease is released when a pass ends")
	require.Len(t, e.ledger(t), 1)
}

// writers inserts rows while a pass runs, remembering every id.
type writers struct {
	e        *env
	backlog  int32
	next     atomic.Int32
	mu       sync.Mutex
	inserted []uuid.UUID
}

// insert adds three rows aged ageDays plus a deterministic offset inside
// the backlog's span: some land behind the pass's cursor, some ahead.
func (w *writers) insert(ctx context.Context, ageDays int) error {
	var ns, mins []int32
	for range 3 {
		n := w.next.Add(1)
		ns = append(ns, n)
		mins = append(mins, n*7919%w.backlog)
	}
	ids, err := w.e.insert(ctx, ns, mins, ageDays, 0)
	w.mu.Lock()
	w.inserted = append(w.inserted, ids...)
	w.mu.Unlock()
	return err
}

// testConcurrentWriters: rows inserted while a pass runs (aged ones behind
// and ahead of the cursor, and fresh ones; between each batch's SELECT and
// DELETE and continuously from another goroutine) are never lost: each is
// in the table or in an archived object, not both.
func testConcurrentWriters(t *testing.T, s suite) {
	e := s.env(t)
	const backlog = 300
	w := &writers{e: e, backlog: backlog, inserted: e.seed(t, 1, backlog+1, 100, 0)}
	w.next.Store(10_000)
	spec := e.table.Spec
	inner := spec.Select
	spec.Select = func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]archive.Row, error) {
		rows, err := inner(ctx, db, p)
		if err != nil {
			return nil, err
		}
		for _, age := range []int{100, 0} { // between this batch's SELECT and its DELETE
			if err := w.insert(ctx, age); err != nil {
				return nil, err
			}
		}
		return rows, nil
	}
	eng := e.engine(t, []archive.TableSpec{spec}, nil, func(c *archive.Config) { c.BatchSize = 25 })

	// Another writer inserts while the pass runs (a bounded number of
	// times, so the pass's cursor can outrun it).
	stop := make(chan struct{})
	writerErr := make(chan error, 1)
	go func() {
		defer close(writerErr)
		for i := range 150 {
			select {
			case <-stop:
				return
			default:
			}
			if err := w.insert(e.ctx, []int{100, 95, 1}[i%3]); err != nil {
				writerErr <- err
				return
			}
		}
	}()
	rep, err := eng.RunPass(e.ctx, 1000)
	close(stop)
	require.NoError(t, <-writerErr)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	checkNothingLost(t, e, w, rep.Tables[0])
}

// checkNothingLost: every inserted row is in the table or in exactly one
// archived line, never both; the backlog is archived; the ledger counts
// what was archived.
func checkNothingLost(t *testing.T, e *env, w *writers, tr archive.TableReport) {
	t.Helper()
	table := e.ids(t)
	archived := map[uuid.UUID]bool{}
	for _, l := range e.archived(t, tr) {
		require.False(t, archived[l.ID], "%s archived twice", l.ID)
		require.False(t, table[l.ID], "%s archived but still in the table", l.ID)
		archived[l.ID] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range w.inserted {
		require.True(t, table[id] || archived[id], "%s was lost", id)
	}
	require.Equal(t, len(w.inserted), len(table)+len(archived), "nothing else appeared or vanished")
	require.Equal(t, int64(len(archived)), tr.Archived)
	for _, id := range w.inserted[:w.backlog] {
		require.True(t, archived[id], "the seeded backlog is archived")
	}
	var ledgerCount int64
	for _, r := range e.ledger(t) {
		ledgerCount += int64(r.RecordCount)
	}
	require.Equal(t, tr.Archived, ledgerCount)
	t.Logf("inserted %d (%d during the pass), archived %d, kept %d", len(w.inserted), len(w.inserted)-int(w.backlog), len(archived), len(table))
}

// testLedgerRanges: a record id resolves through the ledger's id
// range index to the archive(s) that may hold it, and exactly one archived
// object holds its line; ranges are MIN/MAX, so they never invert, even
// when id order and age order disagree and ranges overlap.
func testLedgerRanges(t *testing.T, s suite) {
	e := s.env(t)
	// Row i*7 mod 41 is i minutes older than the 100 days: id order is a
	// permutation of age order, so the batches' id ranges overlap.
	var ns, mins []int32
	for i := int32(1); i <= 40; i++ {
		ns = append(ns, i*7%41)
		mins = append(mins, i)
	}
	_, err := e.insert(e.ctx, ns, mins, 100, 0)
	require.NoError(t, err)
	want := e.docs(t, "true")
	rep := e.pass(t, e.engine(t, nil, nil, func(c *archive.Config) { c.BatchSize = 10 }), 10)
	require.Len(t, rep.Tables[0].Archives, 4)
	for _, r := range e.ledger(t) {
		require.LessOrEqual(t, r.FirstRecordID.String(), r.LastRecordID.String(), "a range never inverts")
	}
	maxCandidates := 0
	for id, doc := range want {
		rows, err := e.h.Pool.Query(e.ctx, `SELECT data_key, manifest_key FROM archive_ledger
			WHERE table_name = $2 AND first_record_id <= $1 AND $1 <= last_record_id ORDER BY archive_id`, id, e.table.Spec.Table)
		require.NoError(t, err)
		type cand struct{ DataKey, ManifestKey string }
		cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cand])
		require.NoError(t, err)
		require.NotEmpty(t, cands, "%s resolves to at least one archive", id)
		maxCandidates = max(maxCandidates, len(cands))
		var found []string
		for _, c := range cands {
			_, _, lines := ReadArchive(e.ctx, t, e.h.Store, c.DataKey, c.ManifestKey)
			for _, l := range lines {
				if l.ID == id {
					found = append(found, l.Text)
				}
			}
		}
		require.Equal(t, []string{doc}, found, "%s is in exactly one candidate, verbatim", id)
	}
	require.Greater(t, maxCandidates, 1, "the permuted ids make ranges overlap: lookups scan candidates")
}
