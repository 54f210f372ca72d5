package app

import (
	"fmt"
	"reflect"
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
	var out []R
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		ft := m.Type
		if ft.NumIn() != 1 || ft.NumOut() != 1 || !isTable(ft.Out(0)) {
			panic(fmt.Sprintf("app: %s.%s is not a table: a registry's methods take nothing and return one app.Local or archive.TableSpec", v.Type(), m.Name))
		}
		if ft.Out(0) == want {
			out = append(out, v.Method(i).Call(nil)[0].Interface().(R))
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
