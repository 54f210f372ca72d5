package rules_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
)

// silentStore is an S3 endpoint that accepts connections and never answers.
func silentStore(t *testing.T) (addr, bucketURL string) {
	t.Helper()
	addr = kerneltest.SilentServer(t)
	return addr, "s3://craig-archive?endpoint=http://" + addr + "&region=us-east-1&use_path_style=true&disable_https=true&anonymous=true"
}

// TestArchivePassFailsOnAHungStore: a store that
// accepts connections and never answers hung `archive run` for minutes,
// holding the archive lease. Each request is now bounded: the pass reports
// a store timeout naming the endpoint, deletes nothing, and frees the lease.
func TestArchivePassFailsOnAHungStore(t *testing.T) {
	t.Parallel()
	ctx, e := newRulesEnv(t)
	aged := seedEvaluations(t, e.db, 1, 21, 100, 0)
	addr, u := silentStore(t)
	st, err := store.Open(ctx, u, store.WithRequestTimeout(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e.st = st
	eng := e.engine(t, []archive.TableSpec{rules.Tables{}.RuleEvaluations()}, rules.Bookkeep, nil)

	start := time.Now()
	rep, err := eng.RunPass(ctx, 4)
	took := time.Since(start)
	require.NoError(t, err, "the pass ran; its table failed")
	terr := rep.Err()
	require.Error(t, terr)
	require.True(t, errors.Is(terr, store.ErrTimeout), "%v", terr)
	require.True(t, errors.Is(terr, archive.ErrStore))
	require.Contains(t, terr.Error(), addr, "the error names what did not answer")
	require.Less(t, took, 30*time.Second)
	require.Equal(t, int64(len(aged)), e.db.Count(t, `SELECT count(*) FROM rule_evaluations`), "nothing deleted")
	require.Zero(t, e.db.Count(t, `SELECT count(*) FROM archive_ledger`))
	held, err := lease.Held(ctx, e.db.Pool, lease.ArchiveKey)
	require.NoError(t, err)
	require.False(t, held, "the archive lease is released")
}

// TestBootRefusesAHungStore: the boot probe of `archive run` (and serve)
// is bounded too, and says which store did not answer.
func TestBootRefusesAHungStore(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	seedEvaluations(t, db, 1, 4, 100, 0)
	addr, u := silentStore(t)
	env := []string{"CRAIG_RULES__DATABASE_URL=" + db.URL, envEnabled + "=true", envStoreURL + "=" + u,
		"CRAIG_RULES__ARCHIVE__STORE__REQUEST_TIMEOUT=1s"}
	for _, args := range [][]string{{"archive", "run"}, {"probe"}, {"serve"}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		code, _, stderr := runRules(ctx, args, env)
		took := time.Since(start)
		cancel()
		require.Equal(t, app.ExitFail, code, "%v: %s", args, stderr)
		require.Less(t, took, 30*time.Second, "%v", args)
		require.Contains(t, stderr, "archiver refused to start", "%v", args)
		require.Contains(t, stderr, "timed out", "%v", args)
		require.Contains(t, stderr, addr, "%v", args)
	}
	require.Equal(t, int64(3), db.Count(t, `SELECT count(*) FROM rule_evaluations`))
}
