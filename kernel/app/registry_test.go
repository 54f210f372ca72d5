package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
)

type registry struct{}

func (registry) Widgets() app.Local[localSettings] {
	return app.Local[localSettings]{Policy: prune.Policy{Table: "widgets"}}
}

func (registry) Gadgets() app.Local[localSettings] {
	return app.Local[localSettings]{Policy: prune.Policy{Table: "gadgets"}}
}

func (registry) GizmoEvents() archive.TableSpec { return archive.TableSpec{Table: "gizmo_events"} }

type badRegistry struct{ registry }

func (badRegistry) Helper(int) app.Local[localSettings] { return app.Local[localSettings]{} }

// TestRegistryMethodsAreTheTables (issue 23): a service's tables are its
// registry's methods, in name order; one added in a file of its own is
// found with no list edited; a method that is not a table fails loudly.
func TestRegistryMethodsAreTheTables(t *testing.T) {
	t.Parallel()
	var swept []string
	for _, l := range app.LocalsOf[localSettings](registry{}) {
		swept = append(swept, l.Policy.Table)
	}
	require.Equal(t, []string{"gadgets", "widgets"}, swept)
	require.Equal(t, []string{"gizmo_events"}, archive.TableNames(app.ArchivedOf(registry{})))
	require.PanicsWithValue(t,
		"app: app_test.badRegistry.Helper is not a table: a registry's methods take nothing and return one app.Local or archive.TableSpec",
		func() { app.LocalsOf[localSettings](badRegistry{}) })
}
