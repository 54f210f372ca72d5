package app_test

import (
	"bytes"
	"testing"
	"testing/fstest"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
	"github.com/stretchr/testify/require"
)

type testSettings struct {
	settings.Transport `koanf:",squash"`
}

// testServiceSQL is the test service's own migration set: one table (the
// kernel imports no service's SQL; this stands for one).
const testServiceSQL = `-- +goose Up
CREATE TABLE exchange_send_jobs (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), status text NOT NULL, completed_at timestamptz);
-- +goose Down
DROP TABLE exchange_send_jobs;
`

func testSpec() app.Spec[testSettings] {
	return app.Spec[testSettings]{
		Name:       "exchange",
		Migrations: migrations.New("exchange", fstest.MapFS{"00001_exchange_send_jobs.sql": {Data: []byte(testServiceSQL)}}),
		// Port 1 on loopback: any attempt to use the database fails loudly.
		Defaults:  testSettings{settings.DefaultTransport("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")},
		Transport: func(s testSettings) settings.Transport { return s.Transport },
	}
}

func TestMainRejectsInvalidInputBeforeTouchingTheDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		wantErr  []string
	}{
		{
			name: "inbox window not longer than outbox", args: []string{"sweep", "--once"},
			env:      []string{"CRAIG_EXCHANGE__EVENT_INBOX_RETENTION_DAYS=30"},
			wantCode: app.ExitUsage,
			wantErr:  []string{"event_inbox_retention_days=30", "CRAIG_EXCHANGE__EVENT_INBOX_RETENTION_DAYS", "CRAIG_EXCHANGE__EVENT_OUTBOX_RETENTION_DAYS"},
		},
		{
			name: "window above ten years", args: []string{"migrate"},
			env:      []string{"CRAIG_EXCHANGE__EVENT_OUTBOX_RETENTION_DAYS=3651", "CRAIG_EXCHANGE__EVENT_INBOX_RETENTION_DAYS=0"},
			wantCode: app.ExitUsage,
			wantErr:  []string{"event_outbox_retention_days=3651", "CRAIG_EXCHANGE__EVENT_OUTBOX_RETENTION_DAYS", "3650"},
		},
		{
			name: "not a number", args: []string{"serve"},
			env:      []string{"CRAIG_EXCHANGE__PRUNE_BATCH_SIZE=lots"},
			wantCode: app.ExitUsage,
			wantErr:  []string{"prune_batch_size=lots", "CRAIG_EXCHANGE__PRUNE_BATCH_SIZE"},
		},
		{
			name: "unknown key", args: []string{"sweep", "--once"},
			env:      []string{"CRAIG_EXCHANGE__EVENT_OUTBOX_RETENTION_DAY=3"},
			wantCode: app.ExitUsage,
			wantErr:  []string{"event_outbox_retention_day (env CRAIG_EXCHANGE__EVENT_OUTBOX_RETENTION_DAY)", "unknown key"},
		},
		{
			name: "exposed admin API without a token", args: []string{"serve"},
			env:      []string{"CRAIG_EXCHANGE__HTTP_ADDR=0.0.0.0:8080"},
			wantCode: app.ExitUsage,
			wantErr:  []string{"admin_token", "CRAIG_EXCHANGE__ADMIN_TOKEN"},
		},
		{name: "sweep without --once", args: []string{"sweep"}, wantCode: app.ExitUsage, wantErr: []string{"--once is required"}},
		{name: "unknown command", args: []string{"prune"}, wantCode: app.ExitUsage, wantErr: []string{`unknown command "prune"`}},
		{name: "no command", args: nil, wantCode: app.ExitUsage, wantErr: []string{"usage: exchange"}},
		{name: "stray argument", args: []string{"migrate", "now"}, wantCode: app.ExitUsage, wantErr: []string{"unexpected arguments"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := app.Main(testSpec(), tt.args, &out, &errOut, tt.env)
			require.Equal(t, tt.wantCode, code)
			for _, w := range tt.wantErr {
				require.Contains(t, errOut.String(), w)
			}
			require.NotContains(t, errOut.String(), "unreachable", "the database must not be contacted")
			require.Empty(t, out.String())
		})
	}
}

func TestMainFailsWhenTheDatabaseIsUnreachable(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := app.Main(testSpec(), []string{"sweep", "--once", "--json"}, &out, &errOut, nil)
	require.Equal(t, app.ExitFail, code)
	require.Contains(t, errOut.String(), "unreachable")
	require.Empty(t, out.String(), "no report is printed when no cycle ran")
}
