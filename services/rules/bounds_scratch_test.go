package rules_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/services/rules"
)

// TestSelectionStopsAtTheByteCap: the selection
// loaded up to batch_size full documents before the byte cap applied (10,000
// rows of 200 KiB = 2 GB, two batches in flight). It now returns documents
// only while they fit max_batch_bytes, and the first row that does not fit
// without its document.
func TestSelectionStopsAtTheByteCap(t *testing.T) {
	t.Parallel()
	ctx, e := newRulesEnv(t)
	seedEvaluations(t, e.db, 1, 51, 100, 20<<10) // 50 rows of ~20 KiB
	spec := rules.Tables{}.RuleEvaluations()
	const maxBytes = 100 << 10
	rows, err := spec.Select(ctx, e.db.Pool, archive.SelectParams{
		HotWindowDays: archive.DefaultHotWindowDays, After: archive.Start, Limit: archive.MaxBatchSize, MaxBytes: maxBytes,
	})
	require.NoError(t, err)
	require.Less(t, len(rows), 10, "a handful of rows, not the 50 the limit allows")
	var docs int64
	for i, r := range rows {
		docs += int64(len(r.Doc))
		if i < len(rows)-1 {
			require.False(t, r.Withheld)
			require.Equal(t, int64(len(r.Doc))+1, r.Size)
		}
	}
	last := rows[len(rows)-1]
	require.True(t, last.Withheld, "the row that would cross the cap comes without its document")
	require.Empty(t, last.Doc)
	require.Greater(t, last.Size, int64(20<<10))
	require.LessOrEqual(t, docs, int64(maxBytes), "never more than max_batch_bytes of documents")

	// A pass with a small cap and the largest batch size archives every
	// row, each object within the cap.
	eng := e.engine(t, []archive.TableSpec{rules.Tables{}.RuleEvaluations()}, rules.Bookkeep, func(c *archive.Config) {
		c.BatchSize, c.MaxBatchBytes = archive.MaxBatchSize, maxBytes
	})
	rep, err := eng.RunPass(ctx, 40)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.False(t, rep.More)
	require.Equal(t, int64(50), rep.Table(rules.EvaluationsTable).Archived)
	for _, ref := range rep.Table(rules.EvaluationsTable).Archives {
		_, data, _ := readArchive(ctx, t, e.st, ref.DataKey, ref.ManifestKey)
		require.LessOrEqual(t, len(data), maxBytes)
	}
	require.Zero(t, e.db.Count(t, `SELECT count(*) FROM rule_evaluations`))
}

// TestArchiveExtremeTimestamps: rows
// at -infinity or BC dates were never archived and never reported (the
// cursor started at year 1), and with batch size 1 the position was lost.
func TestArchiveExtremeTimestamps(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, archive.DefaultBatchSize} {
		ctx, e := newRulesEnv(t)
		ids := make([]uuid.UUID, 5)
		for i := range ids {
			ids[i] = uuid.Must(uuid.NewV7())
		}
		e.db.Exec(t, `INSERT INTO rule_evaluations (id, evaluated_at, rule_id, input, output) VALUES
			($1, '-infinity', 'r', '{}', '{}'),
			($2, '-infinity', 'r', '{}', '{}'),
			($3, '0044-03-15 12:00:00+00 BC', 'r', '{}', '{}'),
			($4, now() - interval '100 days', 'r', '{}', '{}'),
			($5, 'infinity', 'r', '{}', '{}')`, ids[0], ids[1], ids[2], ids[3], ids[4])
		eng := e.engine(t, []archive.TableSpec{rules.Tables{}.RuleEvaluations()}, rules.Bookkeep, func(c *archive.Config) { c.BatchSize = batch })
		rep, err := eng.RunPass(ctx, 10)
		require.NoError(t, err)
		require.NoError(t, rep.Err())
		require.Equal(t, int64(4), rep.Table(rules.EvaluationsTable).Archived, "batch %d: -infinity, BC and 100 days are archived", batch)
		require.Equal(t, int64(1), e.db.Count(t, `SELECT count(*) FROM rule_evaluations`), "+infinity is never older than the hot window")
		lines := archivedLines(ctx, t, e.st, rep.Table(rules.EvaluationsTable))
		got := map[uuid.UUID]string{}
		for _, l := range lines {
			got[l.ID] = l.Text
		}
		require.Contains(t, got[ids[0]], `"evaluated_at": "-infinity"`, "the document keeps the exact value")
		require.Contains(t, got[ids[2]], "BC")
		m, _, _ := readArchive(ctx, t, e.st, rep.Table(rules.EvaluationsTable).Archives[0].DataKey, rep.Table(rules.EvaluationsTable).Archives[0].ManifestKey)
		require.Equal(t, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), m.FirstRecordAt.UTC(), "ranged from year 1, the earliest a manifest can carry")
		require.Equal(t, int64(len(rep.Table(rules.EvaluationsTable).Archives)), e.db.Count(t, `SELECT count(*) FROM archive_ledger`))
	}
}
