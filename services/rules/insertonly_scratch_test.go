package rules_test

import (
	"context"
	"strings"
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/services/rules"
	"github.com/stretchr/testify/require"
)

// TestArchivedTablesAreInsertOnly: insert-only was a
// comment. An UPDATE of an archived row between the archive's SELECT and
// its DELETE silently lost the new version; now the database refuses every
// UPDATE, naming the table and the reason, and changes nothing.
func TestArchivedTablesAreInsertOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	ids := seedEvaluations(t, db, 1, 4, 100, 0)

	for _, stmt := range []string{
		`UPDATE rule_evaluations SET output = '{"changed": true}' WHERE id = $1`,
		`UPDATE rule_evaluations SET evaluated_at = now() WHERE id = $1`,
		`INSERT INTO rule_evaluations (id, rule_id, input, output) VALUES ($1, 'r', '{}', '{}')
		 ON CONFLICT (id) DO UPDATE SET output = '{"changed": true}'`,
	} {
		_, err := db.Pool.Exec(ctx, stmt, ids[0])
		require.Error(t, err, stmt)
		require.ErrorContains(t, err, "rule_evaluations is insert-only", stmt)
		require.ErrorContains(t, err, "UPDATE would be lost")
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE output ? 'changed'`), "nothing changed")
	require.NoError(t, archive.CheckInsertOnly(ctx, db.Pool, rules.ArchiveTables()))

	// DELETE (the archive's prune) stays allowed.
	_, err := db.Pool.Exec(ctx, `DELETE FROM rule_evaluations WHERE id = $1`, ids[0])
	require.NoError(t, err)
}

// TestProbeAndBootRefuseATableWithoutTheTrigger: probe (archiver on or off)
// and archive run fail, naming the table, when the trigger is dropped or
// disabled.
func TestProbeAndBootRefuseATableWithoutTheTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bucketURL := kerneltest.S3Bucket(t)
	for name, sabotage := range map[string]string{
		"Dropped":  `DROP TRIGGER rule_evaluations_insert_only ON rule_evaluations`,
		"Disabled": `ALTER TABLE rule_evaluations DISABLE TRIGGER rule_evaluations_insert_only`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
			seedEvaluations(t, db, 1, 4, 100, 0)
			env := []string{"CRAIG_RULES__DATABASE_URL=" + db.URL}
			code, stdout, _ := runRules(ctx, []string{"probe"}, env)
			require.Equal(t, app.ExitOK, code)
			require.Contains(t, stdout, "insert-only trigger present ("+strings.Join(archive.TableNames(rules.ArchiveTables()), ", ")+")")

			db.Exec(t, sabotage)
			err := archive.CheckInsertOnly(ctx, db.Pool, rules.ArchiveTables())
			require.ErrorIs(t, err, archive.ErrNotInsertOnly)
			require.ErrorContains(t, err, "rule_evaluations")

			code, _, stderr := runRules(ctx, []string{"probe"}, env)
			require.Equal(t, app.ExitFail, code)
			require.Contains(t, stderr, "rule_evaluations has no enabled BEFORE UPDATE trigger")

			on := append(env, envEnabled+"=true", envStoreURL+"="+bucketURL)
			code, _, stderr = runRules(ctx, []string{"archive", "run", "--budget", "1"}, on)
			require.Equal(t, app.ExitFail, code)
			require.Contains(t, stderr, "archiver refused to start")
			require.Contains(t, stderr, "rule_evaluations")
			require.Equal(t, int64(3), db.Count(t, `SELECT count(*) FROM rule_evaluations`), "nothing archived or deleted")
			require.Zero(t, db.Count(t, `SELECT count(*) FROM archive_ledger`))
		})
	}
}
