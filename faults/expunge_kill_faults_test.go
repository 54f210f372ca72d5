//go:build faults

package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// expungeRounds bounds a point's rounds: each round expunges one of the
// seed's 13 cases.
const expungeRounds = 12

// TestExpungeKillMatrix: rules `serve` (failpoints build) SIGKILLed inside
// an expungement's approval at each of its steps (at a seeded-random
// archive of the order for the per-archive ones): afterwards no row of any
// other case is lost or changed and nothing is in two archives; the next
// approval (a clean serve) finishes the order, and then no row of the case
// is in the table or any archive, and no object of a superseded archive is
// left.
func TestExpungeKillMatrix(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	n := min(rounds(t), expungeRounds)
	points := []string{failpoint.ExpungeAfterPut, failpoint.ExpungeBeforeBookCommit, failpoint.ExpungeAfterBookCommit,
		failpoint.ExpungeAfterObjectDestroy, failpoint.ExpungeBeforeHotCommit}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			w := newRulesWorld(t)
			w.Expunged = map[uuid.UUID]bool{}
			tl := newTally("expunge_kill", point)
			rng := rand.New(rand.NewPCG(27, uint64(len(point))))
			requester := token(t, "ops:faults", "archive:purge archive:run archive:read")
			approver := token(t, "ops:approver", "archive:purge archive:read")
			w.seed(t, 300, 13)
			res := runProcess(t, bin, w.env(), 2*time.Minute, "archive", "run", "--budget", "10")
			require.Equal(t, 0, res.code, res.stderr)
			for round := range n {
				c := round + 1 // seedQuery's case_id is g % 13
				w.markCase(t, c)
				clean := startServe(t, bin, w.env())
				var req struct {
					ExpungeID string   `json:"expunge_id"`
					Archives  []string `json:"archives"`
				}
				code, body, err := clean.post(context.Background(), "/admin/subjects/case:"+strconv.Itoa(c)+"/expunge", requester,
					`{"order_ref": "FAULTS-`+strconv.Itoa(round)+`", "reason": "fault suite"}`)
				require.NoError(t, err)
				require.Equal(t, http.StatusAccepted, code, body)
				require.NoError(t, json.Unmarshal([]byte(body), &req))
				clean.stop(t)
				require.NotEmpty(t, req.Archives, "round %d: case %d is archived", round, c)
				hit := 1
				if point != failpoint.ExpungeBeforeHotCommit {
					hit = 1 + rng.IntN(len(req.Archives))
				}
				path := "/admin/subjects/expungements/" + req.ExpungeID + "/approve"
				s := startServe(t, bin, w.env(failpointEnv(point, hit)...))
				_, _, err = s.post(context.Background(), path, approver, `{}`)
				require.Error(t, err, "round %d: the approval dies with its process", round)
				require.True(t, s.killed(t), "round %d: SIGKILL at %s hit %d: %s", round, point, hit, s.stderr)
				tl.Rounds++
				tl.Faults["sigkill"]++
				check(t, w.World, tl, faults.CheckOptions{ExpungeInterrupted: true})

				clean = startServe(t, bin, w.env())
				var done struct {
					Rewritten int `json:"rewritten"`
				}
				require.NoError(t, json.Unmarshal([]byte(mustPost(t, clean, path, approver, `{}`)), &done))
				clean.stop(t)
				require.Equal(t, len(req.Archives), done.Rewritten, "round %d: every archive of the case rewritten", round)
				check(t, w.World, tl, faults.CheckOptions{})
				require.Zero(t, w.db.Count(t, `SELECT count(*) FROM expungements WHERE status <> 'executed'`), "round %d", round)
			}
			tl.write(t)
		})
	}
}

// markCase records the seeded rows of case c as expunged.
func (w *rulesWorld) markCase(t *testing.T, c int) {
	t.Helper()
	for _, rows := range []map[uuid.UUID]string{w.Aged, w.Hot} {
		for id, doc := range rows {
			var v struct {
				Input struct {
					CaseID int `json:"case_id"`
				} `json:"input"`
			}
			require.NoError(t, json.Unmarshal([]byte(doc), &v))
			if v.Input.CaseID == c {
				w.Expunged[id] = true
			}
		}
	}
	require.NotEmpty(t, w.Expunged, fmt.Sprintf("case %d has rows", c))
}
