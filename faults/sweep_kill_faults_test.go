//go:build faults

package faults_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/failpoint"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/rules"
)

// sweepSeed adds, per round, eligible published outbox rows and inbox rows
// past their windows, and rows the sweep must keep: pending outbox rows of
// any age and rows inside the windows.
const sweepSeed = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
  SELECT 'faults.eligible', '{}', now() - make_interval(days => 40, secs => g), now() - make_interval(days => 40, secs => g) FROM generate_series(1, 3000) g;
INSERT INTO event_outbox (event_type, payload, created_at)
  SELECT 'faults.pending', '{}', now() - make_interval(days => 40, secs => g) FROM generate_series(1, 50) g;
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
  SELECT 'faults.young', '{}', now() - make_interval(days => 20, secs => g), now() - make_interval(days => 20, secs => g) FROM generate_series(1, 50) g;
INSERT INTO event_inbox (event_id, event_type, received_at)
  SELECT gen_random_uuid(), 'faults.eligible', now() - make_interval(days => 40, secs => g) FROM generate_series(1, 1000) g;
INSERT INTO event_inbox (event_id, event_type, received_at)
  SELECT gen_random_uuid(), 'faults.young', now() - make_interval(days => 20, secs => g) FROM generate_series(1, 50) g`

// TestSweepKillMatrix: `rules sweep --once` SIGKILLed after a seeded-random
// batch, rounds times: every pending and in-window row is kept every time,
// no lock is left, and a clean sweep then deletes every eligible row.
func TestSweepKillMatrix(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	w := newRulesWorld(t)
	tl := newTally("sweep_kill", failpoint.SweepAfterBatch)
	rng := rand.New(rand.NewPCG(14, 9))
	env := w.env(settings.EnvVar(rules.Name, "prune_batch_size") + "=250")
	keep := func() (int64, int64) {
		return w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type IN ('faults.pending', 'faults.young')`),
			w.db.Count(t, `SELECT count(*) FROM event_inbox WHERE event_type = 'faults.young'`)
	}
	for round := range rounds(t) {
		_, err := w.Pool.Exec(context.Background(), sweepSeed)
		require.NoError(t, err)
		wantOut, wantIn := keep()
		hit := 1 + rng.IntN(12) // 3,000 outbox rows at 250 a batch: 12 batches, then the inbox's
		res := runProcess(t, bin, append(env, failpointEnv(failpoint.SweepAfterBatch, hit)...), 2*time.Minute, "sweep", "--once")
		require.True(t, res.killed, "round %d: hit %d: exit %d: %s", round, hit, res.code, res.stderr)
		tl.Rounds++
		tl.Faults["sigkill"]++
		gotOut, gotIn := keep()
		tl.Checks += 2
		require.Equal(t, wantOut, gotOut, "round %d: every pending and in-window outbox row is kept", round)
		require.Equal(t, wantIn, gotIn, "round %d: every in-window inbox row is kept", round)
		check(t, w.World, tl, faults.CheckOptions{})
	}
	res := runProcess(t, bin, env, 2*time.Minute, "sweep", "--once")
	require.Equal(t, 0, res.code, res.stderr)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'faults.eligible'`))
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM event_inbox WHERE event_type = 'faults.eligible'`))
	require.Equal(t, int64(100*rounds(t)), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type IN ('faults.pending', 'faults.young')`))
	check(t, w.World, tl, faults.CheckOptions{})
	tl.write(t)
}
