package archivetest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/subject"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
// index, not a scan of the table; and each declared subject expression is
// an index's condition (UnindexedSubjects).
func checkSubjectIndexUsed(t *testing.T, e *env, v string) {
	t.Helper()
	var text string
	require.NoError(t, pgx.BeginFunc(e.ctx, e.h.Pool, func(tx pgx.Tx) error {
		var err error
		text, _, err = explain(e.ctx, tx, archive.HotSubjectSQL(e.table.Spec), v)
		return err
	}))
	require.NotContains(t, text, "Seq Scan", "%s: no index on its subject expressions; the hot rows of a subject would scan the table:\n%s", e.table.Spec.Table, text)
	missing, err := UnindexedSubjects(e.ctx, e.h.Pool, e.table.Spec, v)
	require.NoError(t, err)
	require.Empty(t, missing, "%s: no index is built on these subject expressions (a scan that filters by one is not an index on it)", e.table.Spec.Table)
}

// UnindexedSubjects are the subject expressions of spec that are no
// index's condition when the hot rows of subject v are looked up by that
// expression alone (sequential scans off): the plan must name an index
// whose key it is. An index on another column that the planner scans with
// the subject as a filter does not count (ADR-072). Each is returned with
// the plan that shows it.
func UnindexedSubjects(ctx context.Context, pool *pgxpool.Pool, spec archive.TableSpec, v string) ([]string, error) {
	var missing []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, sub := range spec.Subjects {
			text, conds, err := explain(ctx, tx, "SELECT 1 FROM "+pgx.Identifier{spec.Table}.Sanitize()+" AS t WHERE ("+sub.SQL+") = $1", v)
			if err != nil {
				return err
			}
			if len(conds) == 0 {
				missing = append(missing, sub.SQL+"\n"+text)
			}
		}
		return nil
	})
	return missing, err
}

// explain plans sql with $1 = v, sequential scans off, and returns the
// plan and each index it names with its condition.
func explain(ctx context.Context, tx pgx.Tx, sql, v string) (string, map[string]string, error) {
	conds := map[string]string{}
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		return "", nil, err
	}
	var plan []map[string]any
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, v).Scan(&plan); err != nil {
		return "", nil, err
	}
	b, err := json.MarshalIndent(plan, "", " ")
	if err != nil {
		return "", nil, err
	}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		name, _ := n["Index Name"].(string)
		if cond, _ := n["Index Cond"].(string); name != "" && cond != "" {
			conds[name] = cond
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				walk(m)
			}
		}
	}
	for _, p := range plan {
		if root, ok := p["Plan"].(map[string]any); ok {
			walk(root)
		}
	}
	return string(b), conds, nil
}
