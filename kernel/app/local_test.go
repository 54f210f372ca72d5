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

// localSettings is a service's settings: nothing of its local table (the
// table's window key is derived from its registration).
type localSettings struct {
	settings.Transport `koanf:",squash"`
}

func localSpec(table string) app.Spec[localSettings] {
	return app.Spec[localSettings]{
		Name: "exchange",
		Defaults: localSettings{
			Transport: settings.DefaultTransport("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"),
		},
		Transport: func(s localSettings) settings.Transport { return s.Transport },
		Locals: []app.Local[localSettings]{{
			Sweep: prune.Declaration{
				Table:       table,
				AgeColumn:   "done_at",
				Eligible:    "TRUE",
				DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) { return 0, nil },
			},
		}},
	}
}

// TestLocalIsOneValue: the kernel derives a local
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

// TestLocalKeyIsDerived: the table's window key, its default,
// its bounds and its reference row come from the one value; the loaded
// value reaches the policy; a registration whose default a table sets is
// the default; a key that is also a settings field is a wiring error.
func TestLocalKeyIsDerived(t *testing.T) {
	t.Parallel()
	spec := localSpec("gadgets")
	spec.Locals[0].DefaultWindowDays = 45
	keys := spec.DerivedKeys()
	require.Len(t, keys, 1)
	require.Equal(t, "gadgets_retention_days", keys[0].Key)
	require.Equal(t, 45, keys[0].Default)
	require.Contains(t, keys[0].Doc, "`gadgets`")

	cfg, err := app.LoadSettings(spec, settings.Source{Environ: []string{}})
	require.NoError(t, err)
	require.Equal(t, 45, app.Groups(spec, cfg)[1].Policies[0].WindowDays, "the default")
	cfg, err = app.LoadSettings(spec, settings.Source{Environ: []string{"CRAIG_EXCHANGE__GADGETS_RETENTION_DAYS=7"}})
	require.NoError(t, err)
	require.Equal(t, 7, app.Groups(spec, cfg)[1].Policies[0].WindowDays, "the environment")
	require.Equal(t, 45, app.Groups(spec, spec.Defaults)[1].Policies[0].WindowDays, "unloaded settings: the default")

	clash := localSpec("event_outbox")
	clash.Locals[0].Sweep.Table = "event_outbox" // event_outbox_retention_days is a Transport field
	_, err = app.LoadSettings(clash, settings.Source{Environ: []string{}})
	require.ErrorContains(t, err, "event_outbox_retention_days is both a settings field and a table's derived key")
}
