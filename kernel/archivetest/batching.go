package archivetest

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
)

// testBatching: more rows than a batch take several archives; more is true
// exactly when the budget runs out with rows left past the hot window: a
// full last selection with nothing after it is not more (ADR-071).
func testBatching(t *testing.T, s suite) {
	tests := []struct {
		name                string
		rows, batch, budget int
		firstArchived       int
		firstArchives       int
		firstMore           bool
		secondArchived      int
		wantPerArchive      []int
	}{
		{name: "budget runs out with rows left", rows: 25, batch: 10, budget: 2,
			firstArchived: 20, firstArchives: 2, firstMore: true, secondArchived: 5, wantPerArchive: []int{10, 10, 5}},
		{name: "budget ends on a full last selection", rows: 20, batch: 10, budget: 2,
			firstArchived: 20, firstArchives: 2, firstMore: false, secondArchived: 0, wantPerArchive: []int{10, 10}},
		{name: "a spare batch proves the drain", rows: 20, batch: 10, budget: 3,
			firstArchived: 20, firstArchives: 2, firstMore: false, secondArchived: 0, wantPerArchive: []int{10, 10}},
		{name: "one short batch", rows: 5, batch: 10, budget: 1,
			firstArchived: 5, firstArchives: 1, firstMore: false, secondArchived: 0, wantPerArchive: []int{5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := s.env(t)
			aged := e.seed(t, 1, tt.rows+1, 100, 0)
			fresh := e.seed(t, 1000, 1003, 1, 0)
			eng := e.engine(t, nil, nil, func(c *archive.Config) { c.BatchSize = tt.batch })

			rep := e.pass(t, eng, tt.budget)
			require.Equal(t, int64(tt.firstArchived), rep.Tables[0].Archived)
			require.Len(t, rep.Tables[0].Archives, tt.firstArchives)
			require.Equal(t, tt.firstMore, rep.More)
			archived := e.archivedIDs(t, rep.Tables[0])

			rep = e.pass(t, eng, 100)
			require.Equal(t, int64(tt.secondArchived), rep.Tables[0].Archived)
			require.False(t, rep.More)
			archived = append(archived, e.archivedIDs(t, rep.Tables[0])...)

			require.ElementsMatch(t, aged, archived, "every aged row archived exactly once")
			var counts []int
			for _, r := range e.ledger(t) {
				counts = append(counts, int(r.RecordCount))
			}
			require.Equal(t, tt.wantPerArchive, counts, "a ledger row per archive, in order")
			require.Len(t, e.events(t), len(tt.wantPerArchive), "an event per archive")
			require.Equal(t, idSet(fresh), e.ids(t))
		})
	}
}

// testByteCap: a batch whose NDJSON would pass
// max_batch_bytes is cut at the last row that fits and reports more; the
// next batches take the rest, every object within the cap.
func testByteCap(t *testing.T, s suite) {
	e := s.env(t)
	const maxBytes = 4096
	aged := e.seed(t, 1, 21, 100, 700) // lines of ~1 KiB: a few per object
	eng := e.engine(t, nil, nil, func(c *archive.Config) { c.MaxBatchBytes = maxBytes })

	rep := e.pass(t, eng, 1)
	require.True(t, rep.More, "byte-truncated: more")
	tr := rep.Tables[0]
	require.Len(t, tr.Archives, 1)
	k := tr.Archives[0].RecordCount
	require.Greater(t, k, 1)
	require.Less(t, k, len(aged))
	_, data, lines := ReadArchive(e.ctx, t, e.h.Store, tr.Archives[0].DataKey, tr.Archives[0].ManifestKey)
	require.LessOrEqual(t, len(data), maxBytes)
	// The cut is exact: the next row in age order would not have fit.
	nextLen := e.count(t, `SELECT octet_length(to_jsonb(t)::text) + 1 FROM `+e.ident+` AS t ORDER BY `+e.age+`, t.id LIMIT 1`)
	require.Greater(t, int64(len(data))+nextLen, int64(maxBytes))
	require.Zero(t, tr.Quarantined)

	rep = e.pass(t, eng, 100)
	require.False(t, rep.More)
	for _, ref := range rep.Tables[0].Archives {
		data, err := e.h.Store.Get(e.ctx, ref.DataKey)
		require.NoError(t, err)
		require.LessOrEqual(t, len(data), maxBytes)
	}
	archived := make([]uuid.UUID, 0, len(aged))
	for _, l := range lines {
		archived = append(archived, l.ID)
	}
	archived = append(archived, e.archivedIDs(t, rep.Tables[0])...)
	require.ElementsMatch(t, aged, archived)
	require.Zero(t, e.rows(t, "true"))
}
