//go:build faults

package faults_test

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/failpoint"
)

// archiveBudget is each killed pass's budget: hit k of a failpoint (k in
// 1..archiveBudget) falls in its k-th batch.
const archiveBudget = 4

// TestArchiveKillMatrix: `rules archive run` (the real binary, failpoints
// build) SIGKILLed at each archive failpoint, rounds times each at a
// seeded-random batch; after every round the world's invariants hold
// (nothing lost, nothing doubled, every ledger row's objects intact, no lock
// left, orphans only from the last kill between a put and its commit, each
// named by its upload intent and found by verify: the next pass destroyed
// the ones before, ADR-069); a clean pass then finishes the job and leaves
// no orphan and no intent.
func TestArchiveKillMatrix(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	n := rounds(t)
	for _, point := range []string{failpoint.ArchiveAfterDataPut, failpoint.ArchiveAfterManifestPut, failpoint.ArchiveBeforeCommit, failpoint.ArchiveAfterCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			w := newRulesWorld(t)
			tl := newTally("archive_kill", point)
			rng := rand.New(rand.NewPCG(14, uint64(len(point))))
			orphansPerKill := map[string]int{failpoint.ArchiveAfterDataPut: 1, failpoint.ArchiveAfterManifestPut: 2,
				failpoint.ArchiveBeforeCommit: 2, failpoint.ArchiveAfterCommit: 0}[point]
			kills := 0
			for round := range n {
				if remaining := w.aged(t); remaining < archiveBudget*100 {
					w.seed(t, 600, 15)
				}
				hit := 1 + rng.IntN(archiveBudget)
				res := runProcess(t, bin, w.env(failpointEnv(point, hit)...), 2*time.Minute, "archive", "run", "--budget", "4", "--json")
				require.True(t, res.killed, "round %d: the failpoint %s (hit %d) must kill the pass (exit %d): %s", round, point, hit, res.code, res.stderr)
				require.Contains(t, res.stderr, "failpoint "+point)
				kills++
				tl.Rounds++
				tl.Faults["sigkill"]++
				rep := check(t, w.World, tl, faults.CheckOptions{})
				require.LessOrEqual(t, len(rep.Orphans), orphansPerKill, "round %d: orphans only from the last kill between a put and its commit", round)
				for _, o := range rep.Orphans {
					require.Equal(t, int64(1), w.db.Count(t, `SELECT count(*) FROM archive_upload_intents WHERE object_key = $1`, o),
						"round %d: orphan %s is named by its upload intent", round, o)
				}
			}
			// A clean run finishes: every aged row archived, and its first
			// pass destroyed the last kill's orphans.
			for {
				res := runProcess(t, bin, w.env(), 2*time.Minute, "archive", "run", "--budget", "120", "--json")
				require.Equal(t, 0, res.code, res.stderr)
				var rep struct {
					More bool `json:"more"`
				}
				require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(res.stdout)), &rep), res.stdout)
				if !rep.More {
					break
				}
			}
			require.Zero(t, w.aged(t), "every aged row is archived")
			rep := check(t, w.World, tl, faults.CheckOptions{})
			tl.Orphans = len(rep.Orphans)
			require.Empty(t, rep.Orphans, "the passes after the kills destroyed every orphan")
			require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_upload_intents WHERE destroyed_at IS NULL`), "every intent's object is destroyed")
			tl.write(t)
		})
	}
}

// aged counts the rows still past the hot window.
func (w *rulesWorld) aged(t *testing.T) int64 {
	t.Helper()
	return w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE evaluated_at < now() - interval '90 days'`)
}
