package archive

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/craig/retention/kernel/prune"
	"github.com/google/uuid"
)

// SelectRows adapts a table's generated batch query to a SelectFunc: query
// runs the SELECT with the pass's parameters, and each row it returns is
// mapped by its fields, as sqlc names the columns of the documented select
// shape (queries/rules/archive.sql): ID (uuid), AtKey (the age column's
// text), At (the clamped time), DocBytes, Withheld and Doc. A row type
// missing one of them is an error on every batch, naming the field (the
// type is checked once, when SelectRows is called).
func SelectRows[R any](query func(ctx context.Context, db prune.DB, p SelectParams) ([]R, error)) SelectFunc {
	m, merr := newRowMapper(reflect.TypeFor[R]()) // once, not per batch
	return func(ctx context.Context, db prune.DB, p SelectParams) ([]Row, error) {
		if merr != nil {
			return nil, merr
		}
		rows, err := query(ctx, db, p)
		if err != nil {
			return nil, err
		}
		out := make([]Row, len(rows))
		for i := range rows {
			out[i] = m.row(reflect.ValueOf(&rows[i]).Elem())
		}
		return out, nil
	}
}

// rowMapper holds the field indexes of a generated row type.
type rowMapper struct{ id, atKey, at, docBytes, withheld, doc int }

var (
	uuidType   = reflect.TypeFor[uuid.UUID]()
	timeType   = reflect.TypeFor[time.Time]()
	stringType = reflect.TypeFor[string]()
	int64Type  = reflect.TypeFor[int64]()
	boolType   = reflect.TypeFor[bool]()
)

func newRowMapper(t reflect.Type) (rowMapper, error) {
	if t.Kind() != reflect.Struct {
		return rowMapper{}, fmt.Errorf("%w: archive row type %v is not a struct", ErrConfig, t)
	}
	field := func(name string, want reflect.Type) (int, error) {
		f, ok := t.FieldByName(name)
		if !ok || f.Type != want || len(f.Index) != 1 {
			return 0, fmt.Errorf("%w: archive row type %v needs a field %s of type %v (the select's %s column)", ErrConfig, t, name, want, name)
		}
		return f.Index[0], nil
	}
	var m rowMapper
	var err error
	for _, f := range []struct {
		dst  *int
		name string
		typ  reflect.Type
	}{
		{&m.id, "ID", uuidType}, {&m.atKey, "AtKey", stringType}, {&m.at, "At", timeType},
		{&m.docBytes, "DocBytes", int64Type}, {&m.withheld, "Withheld", boolType}, {&m.doc, "Doc", stringType},
	} {
		if *f.dst, err = field(f.name, f.typ); err != nil {
			return rowMapper{}, err
		}
	}
	return m, nil
}

func (m rowMapper) row(v reflect.Value) Row {
	return Row{
		ID: v.Field(m.id).Interface().(uuid.UUID), Key: v.Field(m.atKey).String(),
		At: v.Field(m.at).Interface().(time.Time), Size: v.Field(m.docBytes).Int(),
		Withheld: v.Field(m.withheld).Bool(), Doc: v.Field(m.doc).String(),
	}
}
