package app

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/craig/retention/kernel/archive"
)

// A service's tables are the methods of one registry type of its own (an
// empty struct): every exported method that takes nothing and returns a
// Local[T] is a swept table, every one returning an archive.TableSpec an
// archived table. A team adds a table in a file of its own, one method on
// the registry, and edits no list anywhere: the service's Spec, the tests
// that walk its tables, its settings keys and docs all find it here. The
// order is the methods' (alphabetical), so it is stable.
//
//	type Tables struct{}
//
//	func (Tables) ExchangeWebhookAttempts() app.Local[Settings] { … }

// LocalsOf returns the swept tables registry declares.
func LocalsOf[T any](registry any) []Local[T] { return collect[Local[T]](registry) }

// ArchivedOf returns the archived tables registry declares.
func ArchivedOf(registry any) []archive.TableSpec { return collect[archive.TableSpec](registry) }

var archivedType = reflect.TypeFor[archive.TableSpec]()

// collect calls every exported method of registry that returns an R. A
// method that takes arguments or returns anything but a table is a wiring
// error every test of the service reports at once.
func collect[R any](registry any) []R {
	v := reflect.ValueOf(registry)
	want := reflect.TypeFor[R]()
	// A method on the pointer would be invisible on the value: refuse it
	// rather than drop its table silently.
	if ptr := reflect.PointerTo(v.Type()); ptr.NumMethod() != v.NumMethod() {
		for i := range ptr.NumMethod() {
			if _, ok := v.Type().MethodByName(ptr.Method(i).Name); !ok {
				panic(fmt.Sprintf("app: (*%s).%s has a pointer receiver: a registry's table methods take the value (func (%s) %s() …)", v.Type(), ptr.Method(i).Name, v.Type().Name(), ptr.Method(i).Name))
			}
		}
	}
	var out []R
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		ft := m.Type
		if ft.NumIn() != 1 || ft.NumOut() != 1 || !isTable(ft.Out(0)) {
			panic(fmt.Sprintf("app: %s.%s is not a table: a registry's methods take nothing and return one app.Local or archive.TableSpec", v.Type(), m.Name))
		}
		switch out0 := ft.Out(0); {
		case out0 == want:
			out = append(out, v.Method(i).Call(nil)[0].Interface().(R))
		case out0 != archivedType && want != archivedType:
			panic(fmt.Sprintf("app: %s.%s returns %s, not the service's %s", v.Type(), m.Name, out0, want))
		}
	}
	return out
}

// isTable: an archive.TableSpec or an app.Local of any settings type.
func isTable(t reflect.Type) bool {
	return t == archivedType || (t.PkgPath() == localPkg && strings.HasPrefix(t.Name(), "Local["))
}

// localPkg is this package's path (where Local is declared).
var localPkg = reflect.TypeFor[Local[struct{}]]().PkgPath()

// tableName is what a registered table may be called: a lower-case
// identifier without a double underscore, so that its derived settings
// keys can be set from the environment (where "__" nests) and YAML alike.
var tableName = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// CheckRegistrations refuses a spec whose tables cannot all be swept,
// archived, configured and watched: a table name that is not a plain
// lower-case identifier, a table registered twice (swept or archived), or
// two sweeps sharing an invariant name (their watchdogs would overwrite
// each other's gauge). Every command runs it at start-up, and
// kerneltest.CheckService in the service's tests.
func CheckRegistrations[T any](spec Spec[T]) error {
	var errs []error
	tables := map[string]bool{}
	invariants := map[string]string{}
	add := func(table string) {
		if !tableName.MatchString(table) {
			errs = append(errs, fmt.Errorf("%s: table %q: a table name is a lower-case identifier (a-z, 0-9, single underscores)", spec.Name, table))
		}
		if tables[table] {
			errs = append(errs, fmt.Errorf("%s: table %q is registered twice", spec.Name, table))
		}
		tables[table] = true
	}
	for _, l := range spec.Locals {
		add(l.Sweep.Table)
		if other, dup := invariants[l.Sweep.Invariant]; dup && l.Sweep.Invariant != "" {
			errs = append(errs, fmt.Errorf("%s: tables %q and %q share the invariant name %q: each watchdog needs its own", spec.Name, other, l.Sweep.Table, l.Sweep.Invariant))
		}
		invariants[l.Sweep.Invariant] = l.Sweep.Table
	}
	if spec.Archive != nil {
		for _, t := range spec.Archive.Tables() {
			add(t.Table)
		}
	}
	return errors.Join(errs...)
}
