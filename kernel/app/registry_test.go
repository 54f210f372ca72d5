package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
)

type registry struct{}

func (registry) Widgets() app.Local[localSettings] {
	return app.Local[localSettings]{Sweep: prune.Declaration{Table: "widgets"}}
}

func (registry) Gadgets() app.Local[localSettings] {
	return app.Local[localSettings]{Sweep: prune.Declaration{Table: "gadgets"}}
}

func (registry) GizmoEvents() archive.TableSpec { return archive.TableSpec{Table: "gizmo_events"} }

type badRegistry struct{ registry }

func (badRegistry) Helper(int) app.Local[localSettings] { return app.Local[localSettings]{} }

// TestRegistryMethodsAreTheTables: a service's tables are its
// registry's methods, in name order; one added in a file of its own is
// found with no list edited; a method that is not a table fails loudly.
func TestRegistryMethodsAreTheTables(t *testing.T) {
	t.Parallel()
	var swept []string
	for _, l := range app.LocalsOf[localSettings](registry{}) {
		swept = append(swept, l.Sweep.Table)
	}
	require.Equal(t, []string{"gadgets", "widgets"}, swept)
	require.Equal(t, []string{"gizmo_events"}, archive.TableNames(app.ArchivedOf(registry{})))
	require.PanicsWithValue(t,
		"app: app_test.badRegistry.Helper is not a table: a registry's methods take nothing and return one app.Local or archive.TableSpec",
		func() { app.LocalsOf[localSettings](badRegistry{}) })
}

type pointerRegistry struct{}

func (*pointerRegistry) Widgets() app.Local[localSettings] { return app.Local[localSettings]{} }

type foreignRegistry struct{}

func (foreignRegistry) Widgets() app.Local[struct{ settings.Transport }] {
	return app.Local[struct{ settings.Transport }]{}
}

// TestRegistryRefusesWhatItWouldDrop: a table
// method on the pointer, or one returning another settings type's Local,
// would be dropped silently: both panic naming the method.
func TestRegistryRefusesWhatItWouldDrop(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "app: (*app_test.pointerRegistry).Widgets has a pointer receiver: a registry's table methods take the value (func (pointerRegistry) Widgets() …)",
		func() { app.LocalsOf[localSettings](pointerRegistry{}) })
	require.Panics(t, func() { app.LocalsOf[localSettings](foreignRegistry{}) })
}

// TestCheckRegistrations: odd table names, a table registered twice and
// two sweeps sharing an invariant are refused at start-up, each named.
func TestCheckRegistrations(t *testing.T) {
	t.Parallel()
	require.NoError(t, app.CheckRegistrations(localSpec("widgets")))
	for _, tt := range []struct {
		name   string
		tables []string
		inv    []string
		want   string
	}{
		{"double underscore", []string{"my__tab"}, []string{"a"}, `table "my__tab": a table name is a lower-case identifier`},
		{"upper case", []string{"Payouts"}, []string{"a"}, `table "Payouts"`},
		{"hyphen", []string{"pay-outs"}, []string{"a"}, `table "pay-outs"`},
		{"twice", []string{"dup", "dup"}, []string{"a", "b"}, `table "dup" is registered twice`},
		{"shared invariant", []string{"one", "two"}, []string{"x_retention_overrun", "x_retention_overrun"}, `share the invariant name "x_retention_overrun"`},
	} {
		spec := localSpec(tt.tables[0])
		spec.Locals = nil
		for i, table := range tt.tables {
			l := localSpec(table).Locals[0]
			l.Sweep.Invariant = tt.inv[i]
			spec.Locals = append(spec.Locals, l)
		}
		require.ErrorContains(t, app.CheckRegistrations(spec), tt.want, tt.name)
	}
}
