//go:build faults

package faults_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/failpoint"
)

// dispositionRounds bounds a point's rounds: each round disposes of one of
// the seed's 13 cases.
const dispositionRounds = 6

// TestDispositionKillMatrix: rules `serve` (failpoints build) SIGKILLed
// inside a disposition batch's approval at each of its steps (at a
// seeded-random archive of the batch for the per-archive ones): afterwards
// no row of any other case is lost or changed (none destroyed early) and
// nothing is in two archives; the next approval (a clean serve) finishes
// the batch, and then no row of the closed case is in the table or any
// archive (no due row left), and no object of a superseded archive is
// left.
func TestDispositionKillMatrix(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	n := min(rounds(t), dispositionRounds)
	points := []string{failpoint.ExpungeAfterPut, failpoint.ExpungeBeforeBookCommit, failpoint.ExpungeAfterBookCommit,
		failpoint.ExpungeAfterObjectDestroy, failpoint.DispositionBeforeHotCommit, failpoint.DispositionBeforeComplete}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			w := newRulesWorld(t)
			w.Expunged = map[uuid.UUID]bool{}
			tl := newTally("disposition_kill", point)
			rng := rand.New(rand.NewPCG(73, uint64(len(point))))
			proposer := token(t, "ops:records", "records:schedule records:review records:events")
			approver := token(t, "ops:reviewer", "records:schedule records:review archive:purge")
			w.seed(t, 300, 13)
			res := runProcess(t, bin, w.env(), 2*time.Minute, "archive", "run", "--budget", "10")
			require.Equal(t, 0, res.code, res.stderr)
			clean := startServe(t, bin, w.env())
			code, body, err := clean.post(context.Background(), "/admin/retention/schedule", proposer,
				`{"version":"f-1","items":[{"id":"CW-F","series":"rule_evaluations","starts":"case.closed","retain":"P30D","authority":"fault suite"}]}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, code, body)
			mustPost(t, clean, "/admin/retention/schedule/f-1/approve", approver, `{}`)
			clean.stop(t)
			for round := range n {
				c := round + 1 // seedQuery's case_id is g % 13
				w.markCase(t, c)
				batch, archives := closeAndFreeze(t, bin, w, proposer, c)
				hit := 1
				if point != failpoint.DispositionBeforeHotCommit && point != failpoint.DispositionBeforeComplete {
					hit = 1 + rng.IntN(archives)
				}
				path := "/admin/dispositions/" + batch + "/approve"
				s := startServe(t, bin, w.env(failpointEnv(point, hit)...))
				_, _, err = s.post(context.Background(), path, approver, `{}`)
				require.Error(t, err, "round %d: the approval dies with its process", round)
				require.True(t, s.killed(t), "round %d: SIGKILL at %s hit %d: %s", round, point, hit, s.stderr)
				tl.Rounds++
				tl.Faults["sigkill"]++
				check(t, w.World, tl, faults.CheckOptions{ExpungeInterrupted: true})

				clean = startServe(t, bin, w.env())
				var done struct {
					Rewritten int `json:"archives_rewritten"`
					Purged    int `json:"archives_purged"`
					Destroyed int `json:"cases_destroyed"`
				}
				require.NoError(t, json.Unmarshal([]byte(mustPost(t, clean, path, approver, `{}`)), &done))
				clean.stop(t)
				require.Equal(t, 1, done.Destroyed, "round %d", round)
				require.Equal(t, archives, done.Rewritten+done.Purged, "round %d: every archive of the case rewritten", round)
				check(t, w.World, tl, faults.CheckOptions{})
				require.Zero(t, w.db.Count(t, `SELECT count(*) FROM dispositions WHERE status <> 'executed'`), "round %d", round)
			}
			tl.write(t)
		})
	}
}

// closeAndFreeze closes case c sixty days ago (due thirty days after) and
// freezes a batch of it on a clean serve: the batch's id and the archives
// holding the case.
func closeAndFreeze(t *testing.T, bin string, w *rulesWorld, tok string, c int) (string, int) {
	t.Helper()
	clean := startServe(t, bin, w.env())
	defer clean.stop(t)
	at := time.Now().UTC().AddDate(0, 0, -60).Format(time.RFC3339)
	code, body, err := clean.post(context.Background(), "/admin/subjects/case:"+strconv.Itoa(c)+"/events", tok,
		`{"type":"case.closed","at":"`+at+`","classification":"fault"}`)
	require.NoError(t, err)
	require.Less(t, code, 300, body)
	code, body, err = clean.post(context.Background(), "/admin/dispositions", tok, `{}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, body)
	var b struct {
		ID    string `json:"disposition_id"`
		Items []struct {
			Cases []struct {
				Subject  string   `json:"subject"`
				Archives []string `json:"archives"`
			} `json:"cases"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &b))
	require.Len(t, b.Items, 1, body)
	require.Len(t, b.Items[0].Cases, 1, "only case %d is closed: %s", c, body)
	require.Equal(t, "case:"+strconv.Itoa(c), b.Items[0].Cases[0].Subject)
	require.NotEmpty(t, b.Items[0].Cases[0].Archives)
	return b.ID, len(b.Items[0].Cases[0].Archives)
}
