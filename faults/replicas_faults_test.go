//go:build faults

package faults_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/failpoint"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/rules"
)

// Replica scenario sizes: four serves, a sweep cycle every 100 ms each, at
// least replicaCycles cycles in all, archive passes every second.
const (
	replicas      = 4
	replicaCycles = 100
	replicaPoll   = 50 * time.Millisecond
	replicaEvery  = 2
	// replicaBound bounds the wait for replicaCycles cycles: at the
	// nominal 10 cycles/s per replica they take 2.5 s; 5 minutes is a
	// bound for a stalled run, never a rate.
	replicaBound = 5 * time.Minute
)

// sweepCycles is the sweep cycles the serves have run between them.
func sweepCycles(t *testing.T, serves []*served) float64 {
	t.Helper()
	var n float64
	for _, s := range serves {
		n += scrape(t, s)[`retention_prune_duration_seconds_count{table="event_outbox"}`]
	}
	return n
}

// replicaWrite is what the writer adds every tick while the replicas run:
// eligible and must-keep outbox rows and aged evaluations.
const replicaWrite = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at)
  SELECT 'faults.eligible', '{}', now() - make_interval(days => 40, secs => g), now() - make_interval(days => 40, secs => g) FROM generate_series(1, 200) g;
INSERT INTO event_outbox (event_type, payload, created_at)
  SELECT 'faults.pending', '{}', now() - make_interval(days => 40, secs => g) FROM generate_series(1, 5) g`

// TestReplicas: four rules `serve` processes on one database, sweeping
// every 100 ms and archiving every second while a writer adds eligible and
// must-keep rows: every eligible row is deleted exactly once (the replicas'
// deletes add up to the rows written), no pending row is ever deleted, no
// row is archived twice or lost, and every replica's invariants hold.
func TestReplicas(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	w := newRulesWorld(t)
	tl := newTally("replicas", "4 serves")
	w.seed(t, 1500, 20)
	env := w.env(failpoint.EnvPoll+"="+replicaPoll.String(), failpoint.EnvSweepEvery+"="+strconv.Itoa(replicaEvery),
		settings.EnvVar(rules.Name, "archive.interval_seconds")+"=1")
	var serves []*served
	for range replicas {
		serves = append(serves, startServe(t, bin, env))
	}
	ctx := context.Background()
	writes := 0
	// The writer goes on until the replicas have run replicaCycles sweep
	// cycles between them: a count, waited for with a generous bound, never
	// a rate (a fresh-clone CI run on a loaded machine ran 75 in the time
	// that once sufficed for 100).
	bound := time.Now().Add(replicaBound)
	for sweepCycles(t, serves) < replicaCycles {
		require.True(t, time.Now().Before(bound), "the replicas ran fewer than %d sweep cycles within %v", replicaCycles, replicaBound)
		_, err := w.Pool.Exec(ctx, replicaWrite)
		require.NoError(t, err)
		require.NoError(t, w.Seed(ctx, seedQuery(false), 50, false))
		writes++
		time.Sleep(200 * time.Millisecond)
	}
	eligible := int64(writes * 200)
	require.Eventually(t, func() bool {
		return w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'faults.eligible'`) == 0 && w.aged(t) == 0
	}, time.Minute, 100*time.Millisecond, "the replicas delete every eligible row and archive every aged one")
	var deleted, cycles float64
	for i, s := range serves {
		m := scrape(t, s)
		deleted += m[`event_rows_pruned_total{table="event_outbox"}`]
		cycles += m[`retention_prune_duration_seconds_count{table="event_outbox"}`]
		for k, v := range m {
			if strings.HasPrefix(k, "retention_invariant_violations") {
				tl.Checks++
				require.Zero(t, v, "replica %d: %s", i, k)
			}
		}
	}
	for _, s := range serves {
		s.stop(t)
	}
	tl.Rounds = int(cycles)
	tl.Faults["replicas"] = replicas
	require.GreaterOrEqual(t, cycles, float64(replicaCycles), "at least %d sweep cycles ran", replicaCycles)
	require.Equal(t, float64(eligible), deleted, "every eligible row deleted exactly once across the replicas")
	require.Equal(t, int64(writes*5), w.db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'faults.pending'`), "no pending row deleted")
	check(t, w.World, tl, faults.CheckOptions{})
	tl.write(t)
}

// scrape reads a serve's /metrics into series → value.
func scrape(t *testing.T, s *served) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	require.NoError(t, sc.Err())
	return out
}
