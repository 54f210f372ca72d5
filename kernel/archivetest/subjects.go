package archivetest

import (
	"slices"
	"strings"
	"testing"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/subject"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// testSubjectKey is the subject key the suite indexes with.
var testSubjectKey = func() subject.Key {
	k, err := subject.NewKey([]byte("archivetest subject key: 32 bytes or more of it"))
	if err != nil {
		panic(err)
	}
	return k
}

// testSubjects: every subject the table declares is found for the seeded
// rows (the seed must fill what the subject reads); the hot rows of a
// subject are found through an index on the declared expression; each
// archive is indexed, in its booking, by exactly the keyed hashes of the
// subjects its lines are about (read back from the archived documents, as
// the subject reads and the backfill read them), never in clear.
func testSubjects(t *testing.T, s suite) {
	if len(s.table.Spec.Subjects) == 0 {
		t.Logf("%s declares no subjects: nothing to index", s.table.Spec.Table)
		return
	}
	e := s.env(t)
	e.seed(t, 1, 41, 100, 0)
	e.seed(t, 1000, 1005, 10, 0)
	key := testSubjectKey()
	hot := map[string]bool{}
	for _, sub := range e.table.Spec.Subjects {
		rows, err := e.h.Pool.Query(e.ctx, "SELECT DISTINCT ("+sub.SQL+")::text FROM "+e.ident+" AS t WHERE ("+sub.SQL+") IS NOT NULL")
		require.NoError(t, err)
		vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NotEmpty(t, vals, "%s: the seed yields no %s subject for %s: seed what it reads", e.table.Spec.Table, sub.Kind, sub.SQL)
		for _, v := range vals {
			require.True(t, subject.IsCanonical(v), "%s: %s yields a subject that is not canonical", e.table.Spec.Table, sub.SQL)
			require.True(t, strings.HasPrefix(v, string(sub.Kind)+":"), "%s: %s is declared %s", e.table.Spec.Table, sub.SQL, sub.Kind)
			hot[v] = true
		}
	}
	checkSubjectIndexUsed(t, e, slices.Sorted(func(yield func(string) bool) {
		for v := range hot {
			if !yield(v) {
				return
			}
		}
	})[0])

	rep := e.pass(t, e.engine(t, nil, nil, func(c *archive.Config) { c.LedgerHolds, c.SubjectKey = true, key }), archive.DefaultManualBudget)
	require.NotEmpty(t, rep.Tables[0].Archives)
	indexed := map[string]bool{}
	for _, a := range rep.Tables[0].Archives {
		_, _, lines := ReadArchive(e.ctx, t, e.h.Store, a.DataKey, a.ManifestKey)
		docs := make([]string, len(lines))
		for i, l := range lines {
			docs[i] = l.Text
		}
		want, err := archive.Hashes(e.ctx, e.h.Pool, key, e.table.Spec.Table, archive.DocSubjectsSQL(e.table.Spec), docs)
		require.NoError(t, err)
		var got [][]byte
		require.NoError(t, pgx.BeginFunc(e.ctx, e.h.Pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(e.ctx, "SELECT unnest(subject_hashes) FROM archive_subjects WHERE archive_id = $1", a.ArchiveID)
			if err != nil {
				return err
			}
			got, err = pgx.CollectRows(rows, pgx.RowTo[[]byte])
			return err
		}))
		require.ElementsMatch(t, want, got, "archive %s: its index is the subjects of its lines", a.ArchiveID)
		require.Equal(t, int64(1), e.count(t, "SELECT count(*) FROM archive_ledger WHERE archive_id = $1 AND subjects_indexed", a.ArchiveID))
		for _, h := range got {
			indexed[subject.Hex(h)] = true
		}
	}
	for v := range hot {
		sub, err := subject.Parse(v)
		require.NoError(t, err)
		delete(indexed, subject.Hex(key.Hash(sub)))
	}
	require.Empty(t, indexed, "the index holds only hashes of the rows' subjects")
	require.Zero(t, e.count(t, "SELECT count(*) FROM archive_subjects, unnest(subject_hashes) AS h WHERE position(convert_to('case:', 'UTF8') in h) > 0"),
		"no subject in clear in the index")
}

// checkSubjectIndexUsed: the hot rows of a subject are found through an
// index (the declared expression has one), not a scan of the table.
func checkSubjectIndexUsed(t *testing.T, e *env, v string) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(e.ctx, e.h.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(e.ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		rows, err := tx.Query(e.ctx, "EXPLAIN "+archive.HotSubjectSQL(e.table.Spec), v)
		if err != nil {
			return err
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		text := strings.Join(plan, "\n")
		require.NotContains(t, text, "Seq Scan", "%s: no index on its subject expressions; the hot rows of a subject would scan the table:\n%s", e.table.Spec.Table, text)
		return nil
	}))
}
