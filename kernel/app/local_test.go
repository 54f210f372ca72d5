package app_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
)

// localSettings is a service with one local sweep's window.
type localSettings struct {
	settings.Transport `koanf:",squash"`
	Widgets            int `koanf:"widgets_retention_days"`
}

func localSpec(table string) app.Spec[localSettings] {
	return app.Spec[localSettings]{
		Name: "exchange",
		Defaults: localSettings{
			Transport: settings.DefaultTransport("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"),
			Widgets:   settings.DefaultLocalRetentionDays,
		},
		Transport: func(s localSettings) settings.Transport { return s.Transport },
		Locals: []app.Local[localSettings]{{
			Policy: prune.Policy{Table: table, AgeColumn: "done_at", Eligible: "TRUE",
				DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) { return 0, nil }},
			Window: func(s localSettings) int { return s.Widgets },
		}},
	}
}

// TestLocalIsOneValue (issue 10 item 1): the kernel derives a local
// table's group, lock key and window validation from one value.
func TestLocalIsOneValue(t *testing.T) {
	t.Parallel()
	spec := localSpec("widgets")
	groups := app.Groups(spec, spec.Defaults)
	require.Len(t, groups, 2)
	g := groups[1]
	require.Equal(t, "widgets", g.Name)
	require.Equal(t, lease.KeyFor("exchange", "widgets"), g.LockKey)
	require.NotEqual(t, lease.TransportKey, g.LockKey)
	require.Equal(t, settings.DefaultLocalRetentionDays, g.Policies[0].WindowDays)
	require.Equal(t, lease.KeyFor("exchange", "widgets"), lease.KeyFor("exchange", "widgets"), "stable")
	require.NotEqual(t, lease.KeyFor("exchange", "widgets"), lease.KeyFor("financial", "widgets"), "per service")

	for _, tt := range []struct {
		value string
		ok    bool
	}{{"0", true}, {"3650", true}, {"3651", false}, {"-1", false}, {"030", false}} {
		var out, errOut bytes.Buffer
		code := app.Run(context.Background(), spec, []string{"sweep", "--once", "--dry-run"}, &out, &errOut,
			[]string{"CRAIG_EXCHANGE__WIDGETS_RETENTION_DAYS=" + tt.value})
		if tt.ok {
			require.NotEqual(t, app.ExitUsage, code, "%s: %s", tt.value, errOut.String())
			continue
		}
		require.Equal(t, app.ExitUsage, code, tt.value)
		require.Contains(t, errOut.String(), "widgets_retention_days="+tt.value)
		require.Contains(t, errOut.String(), "CRAIG_EXCHANGE__WIDGETS_RETENTION_DAYS")
	}
}

// TestLocalWithoutItsSettingsKey: a local sweep whose table has no
// <table>_retention_days key in the settings is refused at start-up.
func TestLocalWithoutItsSettingsKey(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := app.Run(context.Background(), localSpec("gadgets"), []string{"sweep", "--once"}, &out, &errOut, []string{})
	require.Equal(t, app.ExitUsage, code)
	require.Contains(t, errOut.String(), "needs a settings key gadgets_retention_days")
}
