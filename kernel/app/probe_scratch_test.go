package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/migrations"
)

// logLines parses the JSON log lines a command wrote to stderr.
func logLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "log line %q", line)
		out = append(out, m)
	}
	return out
}

// planWarnings returns the WARN log lines of the start-up plan check.
func planWarnings(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range logLines(t, stderr) {
		if l["level"] == "WARN" && strings.Contains(l["msg"].(string), "sweep plan scans a large table") {
			out = append(out, l)
		}
	}
	return out
}

// TestProbePlanCheck: with the sweep's partial index, the outbox selection
// is an index scan and probe is quiet; with the index dropped it is a
// sequential scan of a table above plan_check_seqscan_rows, which probe and
// serve report and probe --strict fails on.
func TestProbePlanCheck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'fresh', '{}', now() - interval '1 hour', now() - interval '1 hour' FROM generate_series(1, 30000)`)
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'aged', '{}', now() - interval '40 days', now() - interval '40 days' FROM generate_series(1, 5)`)
	db.Exec(t, "ANALYZE event_outbox")
	db.Exec(t, "ANALYZE event_inbox")

	env := func(extra ...string) []string {
		return append([]string{
			"CRAIG_EXCHANGE__DATABASE_URL=" + db.URL,
			"CRAIG_EXCHANGE__PLAN_CHECK_SEQSCAN_ROWS=1000",
		}, extra...)
	}
	run := func(args []string, environ []string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := app.Run(ctx, testSpec(), args, &out, &errOut, environ)
		return code, out.String(), errOut.String()
	}

	// With the index: quiet, strict or not.
	for _, args := range [][]string{{"probe"}, {"probe", "--strict"}} {
		code, out, errOut := run(args, env())
		require.Equal(t, app.ExitOK, code, "%v: %s", args, errOut)
		require.Contains(t, out, "database: reachable")
		require.Contains(t, out, "every selection avoids a sequential scan")
		require.NotContains(t, out, "WARN")
		require.Empty(t, planWarnings(t, errOut))
	}

	db.Exec(t, "DROP INDEX event_outbox_published_created_idx")
	db.Exec(t, "ANALYZE event_outbox")

	tests := []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		wantWarn bool
	}{
		{name: "Probe", args: []string{"probe"}, env: env(), wantCode: app.ExitOK, wantWarn: true},
		{name: "Strict", args: []string{"probe", "--strict"}, env: env(), wantCode: app.ExitFail, wantWarn: true},
		// The default threshold (100,000 rows) is above this table.
		{
			name: "SmallTableAtTheDefaultThreshold", args: []string{"probe", "--strict"},
			env: []string{"CRAIG_EXCHANGE__DATABASE_URL=" + db.URL}, wantCode: app.ExitOK,
		},
		// A disabled sweep runs no selection, so its plan is not checked.
		{
			name: "DisabledSweep", args: []string{"probe", "--strict"},
			env: env("CRAIG_EXCHANGE__EVENT_OUTBOX_RETENTION_DAYS=0"), wantCode: app.ExitOK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(tt.args, tt.env)
			require.Equal(t, tt.wantCode, code, errOut)
			if !tt.wantWarn {
				require.NotContains(t, out, "WARN")
				require.Empty(t, planWarnings(t, errOut))
				return
			}
			require.Contains(t, out, "WARN event_outbox: the sweep's selection scans the whole table")
			require.Contains(t, out, "plan_check_seqscan_rows=1000")
			require.Contains(t, out, "Seq Scan on event_outbox")
			require.NotContains(t, out, "event_inbox:", "the inbox still has its index")
			warns := planWarnings(t, errOut)
			require.Len(t, warns, 1)
			require.Equal(t, "event_outbox", warns[0]["table"])
			require.Greater(t, warns[0]["estimated_rows"], float64(1000))
		})
	}

	t.Run("ServeChecksAtStartUp", func(t *testing.T) {
		// serve runs the same check at start-up. The broker is unreachable
		// here: serve boots anyway and stops when
		// its context ends.
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		code := app.Run(sctx, testSpec(), []string{"serve"}, &out, &errOut,
			env("CRAIG_EXCHANGE__AMQP_URL=amqp://guest:guest@127.0.0.1:1/", "CRAIG_EXCHANGE__HTTP_ADDR=127.0.0.1:0"))
		require.Equal(t, app.ExitOK, code, errOut.String())
		require.Len(t, planWarnings(t, errOut.String()), 1, errOut.String())
		require.Contains(t, errOut.String(), "cannot reach the broker")
	})
}

func TestProbeUnreachableDatabase(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := app.Run(context.Background(), testSpec(), []string{"probe", "--strict"}, &out, &errOut, nil)
	require.Equal(t, app.ExitFail, code)
	require.Contains(t, errOut.String(), "unreachable")
	require.Empty(t, out.String())
}

// TestProbeStrictDuringABacklog: probe --strict
// EXPLAINed a query that is not the keyset query the sweep runs, and
// warned (exit 1) with the index present when 75% of the outbox was
// eligible. It now explains the sweep's own statements.
func TestProbeStrictDuringABacklog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := kerneltest.NewDB(t, migrations.Transport())
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'aged', '{}', now() - interval '40 days' - make_interval(secs => g), now() - interval '40 days'
		FROM generate_series(1, 150000) AS g`)
	db.Exec(t, `INSERT INTO event_outbox (event_type, payload, created_at, published_at)
		SELECT 'fresh', '{}', now() - interval '1 hour', now() - interval '1 hour' FROM generate_series(1, 50000)`)
	db.Exec(t, "ANALYZE event_outbox")
	env := []string{"CRAIG_EXCHANGE__DATABASE_URL=" + db.URL, "CRAIG_EXCHANGE__PLAN_CHECK_SEQSCAN_ROWS=1000"}
	var out, errOut bytes.Buffer
	code := app.Run(ctx, testSpec(), []string{"probe", "--strict"}, &out, &errOut, env)
	require.Equal(t, app.ExitOK, code, "%s\n%s", out.String(), errOut.String())
	require.NotContains(t, out.String(), "WARN")
	require.Equal(t, int64(200000), db.Count(t, `SELECT count(*) FROM event_outbox`), "the probe deleted nothing")

	db.Exec(t, "DROP INDEX event_outbox_published_created_idx")
	db.Exec(t, "ANALYZE event_outbox")
	out.Reset()
	errOut.Reset()
	code = app.Run(ctx, testSpec(), []string{"probe", "--strict"}, &out, &errOut, env)
	require.Equal(t, app.ExitFail, code, "without its index the sweep's statements scan the table")
	require.Contains(t, out.String(), "WARN event_outbox")
	require.Equal(t, int64(200000), db.Count(t, `SELECT count(*) FROM event_outbox`))
}
