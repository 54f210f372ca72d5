//go:build faults

package faults_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/failpoint"
)

// purgeLimit is each killed purge's limit: hit k (1..purgeLimit) falls in
// its k-th archive.
const purgeLimit = 3

// TestPurgeKillMatrix: rules `serve` (failpoints build) SIGKILLed inside a
// purge call at each purge failpoint, rounds times each at a
// seeded-random archive of the call: afterwards no row is lost that was not
// due, every stamped archive's objects are gone, a half-destroyed archive
// is only a due, unheld one; the next purge call (a clean serve) finishes
// it, and then every ledger row is either stamped and gone or intact.
func TestPurgeKillMatrix(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	n := rounds(t)
	for _, point := range []string{failpoint.PurgeAfterManifestDelete, failpoint.PurgeAfterDataDelete, failpoint.PurgeBeforeStampCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			w := newRulesWorld(t)
			tl := newTally("purge_kill", point)
			rng := rand.New(rand.NewPCG(14, uint64(len(point))))
			tok := token(t, "ops:faults", "archive:purge archive:run archive:read")
			for round := range n {
				w.dueArchives(t, bin, purgeLimit)
				hit := 1 + rng.IntN(purgeLimit)
				s := startServe(t, bin, w.env(failpointEnv(point, hit)...))
				_, _, err := s.post(context.Background(), "/admin/archive/purge", tok, `{"limit": 3}`)
				require.Error(t, err, "round %d: the purge call dies with its process", round)
				require.True(t, s.killed(t), "round %d: SIGKILL at %s hit %d: %s", round, point, hit, s.stderr)
				tl.Rounds++
				tl.Faults["sigkill"]++
				rep := check(t, w.World, tl, faults.CheckOptions{PurgeInterrupted: true})
				tl.Faults["half_purged"] += rep.HalfPurged

				clean := startServe(t, bin, w.env())
				var ans struct {
					More bool `json:"more"`
				}
				require.NoError(t, json.Unmarshal([]byte(mustPost(t, clean, "/admin/archive/purge", tok, `{"limit": 100}`)), &ans))
				require.False(t, ans.More)
				clean.stop(t)
				rep = check(t, w.World, tl, faults.CheckOptions{})
				require.Zero(t, rep.HalfPurged)
				require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE purged_at IS NULL AND retention_until <= (now() AT TIME ZONE 'UTC')::date`),
					"round %d: the next call finished every due archive", round)
			}
			tl.write(t)
		})
	}
}

// dueArchives makes at least n unpurged archives due: seeds and archives
// aged rows (a clean pass), then dates every unpurged archive yesterday.
func (w *rulesWorld) dueArchives(t *testing.T, bin string, n int) {
	t.Helper()
	if w.db.Count(t, `SELECT count(*) FROM archive_ledger WHERE purged_at IS NULL`) < int64(n) {
		w.seed(t, 100*(n+1), 5)
		res := runProcess(t, bin, w.env(), 2*time.Minute, "archive", "run", "--budget", "120")
		require.Equal(t, 0, res.code, res.stderr)
	}
	_, err := w.Pool.Exec(context.Background(), `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE purged_at IS NULL`)
	require.NoError(t, err)
}
