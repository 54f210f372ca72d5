package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/financial"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
	"github.com/stretchr/testify/require"
)

// runner runs one command of one service binary in-process.
type runner func(ctx context.Context, args []string, stdout, stderr *bytes.Buffer, env []string) int

func runnerOf[T any](spec app.Spec[T]) runner {
	return func(ctx context.Context, args []string, stdout, stderr *bytes.Buffer, env []string) int {
		return app.Run(ctx, spec, args, stdout, stderr, env)
	}
}

// seedTransport inserts, into any service database, rows the transport
// sweep must delete (3) and must keep (4) in each of its two tables.
const seedTransport = `
INSERT INTO event_outbox (event_type, payload, created_at, published_at) VALUES
  ('e', '{}', now() - interval '40 days', now() - interval '40 days'),
  ('e', '{}', now() - interval '35 days', now() - interval '35 days'),
  ('e', '{}', now() - interval '31 days', now() - interval '31 days'),
  ('e', '{}', now() - interval '29 days', now() - interval '29 days'),
  ('e', '{}', now() - interval '1 day',   now() - interval '1 day');
INSERT INTO event_outbox (event_type, payload, created_at, last_error) VALUES
  ('e', '{}', now() - interval '40 days', 'broker refused'),
  ('e', '{}', now() - interval '40 days', NULL);
INSERT INTO event_inbox (event_id, event_type, received_at) VALUES
  (gen_random_uuid(), 'e', now() - interval '40 days'),
  (gen_random_uuid(), 'e', now() - interval '33 days'),
  (gen_random_uuid(), 'e', now() - interval '32 days'),
  (gen_random_uuid(), 'e', now() - interval '30 days'),
  (gen_random_uuid(), 'e', now() - interval '10 days');
`

func TestEveryServiceMigratesAndSweeps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		service string
		run     runner
		swept   []string // every swept table, as the spec derives them
	}{
		{exchange.Name, runnerOf(exchange.Spec()), sweptTables(exchange.Spec())},
		{financial.Name, runnerOf(financial.Spec()), sweptTables(financial.Spec())},
		{rules.Name, runnerOf(rules.Spec()), sweptTables(rules.Spec())},
		{security.Name, runnerOf(security.Spec()), sweptTables(security.Spec())},
	}
	for _, tt := range tests {
		t.Run(tt.service, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := kerneltest.NewDB(t) // empty: the binary's migrate builds it
			env := []string{settings.EnvVar(tt.service, "database_url") + "=" + db.URL}
			var out, errOut bytes.Buffer
			require.Equal(t, app.ExitOK, tt.run(ctx, []string{"migrate"}, &out, &errOut, env), errOut.String())
			db.Exec(t, seedTransport)

			out.Reset()
			require.Equal(t, app.ExitOK, tt.run(ctx, []string{"sweep", "--once", "--json"}, &out, &errOut, env), errOut.String())
			var rep sweep.Report
			require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
			require.True(t, rep.LockAcquired)
			wantTables := tt.swept
			require.Equal(t, []string{sweep.OutboxTable, sweep.InboxTable}, wantTables[:2], "transport first")
			var gotTables []string
			for _, tr := range rep.Tables {
				gotTables = append(gotTables, tr.Table)
			}
			require.Equal(t, wantTables, gotTables)
			require.Equal(t, int64(3), rep.Tables[0].Deleted, "outbox: the three published rows older than 30 days")
			require.Equal(t, int64(3), rep.Tables[1].Deleted, "inbox: the three rows older than 31 days")
			require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NULL`), "pending rows are evidence")
			require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM event_outbox WHERE published_at IS NOT NULL`))
			require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM event_inbox`))

			// A second cycle finds nothing: the sweep is idempotent.
			out.Reset()
			require.Equal(t, app.ExitOK, tt.run(ctx, []string{"sweep", "--once", "--json"}, &out, &errOut, env), errOut.String())
			require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
			require.Zero(t, rep.Deleted())
		})
	}
}

// serviceDB is a scratch database with every migration set of the named
// service (its spec's).
func serviceDB(t *testing.T, service string) *kerneltest.DB {
	t.Helper()
	sets := map[string][]migrations.Set{
		exchange.Name: exchange.Spec().MigrationSets(), financial.Name: financial.Spec().MigrationSets(),
		rules.Name: rules.Spec().MigrationSets(), security.Name: security.Spec().MigrationSets(),
	}[service]
	require.NotEmpty(t, sets, service)
	return kerneltest.NewDB(t, sets...)
}
