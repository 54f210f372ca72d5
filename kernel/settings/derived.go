package settings

import (
	"fmt"
	"reflect"
	"sort"
)

// Derived is a settings key a service's registration declares instead of a
// struct field: a table's window, hot window or retention schedule. The
// kernel derives them from the tables a service registers (app.Spec), so a
// team adding a table writes no settings field, no default and no reference
// row: the key, its default, its bounds, its environment variable and its
// line in docs/configuration.md all come from the table's one value.
type Derived struct {
	// Key is the dotted key (exchange_send_jobs_retention_days,
	// archive.retention.rule_evaluations_days).
	Key string
	// Default is the value when neither the file nor the environment sets
	// the key.
	Default int
	// Min and Max bound the value (inclusive).
	Min, Max int
	// Bounds says in words what Min..Max mean ("0 disables the sweep").
	Bounds string
	// Doc is the key's description in the configuration reference.
	Doc string
}

// Values holds the derived keys' values after a load: key → value.
type Values map[string]int

// Get returns the value of key and whether it was loaded.
func (v Values) Get(key string) (int, bool) {
	n, ok := v[key]
	return n, ok
}

// derivedHolder is implemented by Transport (so by every service's settings,
// which embed it): a load stores the derived keys' values there.
type derivedHolder interface {
	setDerived(Values)
}

func (t *Transport) setDerived(v Values) { t.Derived = v }

var intType = reflect.TypeFor[int]()

// LoadDerived is Load for a service that declares derived keys: they are
// known keys (of type integer) beside T's fields, parsed and bounded like
// them, and their values are stored in the settings' Transport.Derived
// (every key present, at its default when not set). A derived key that is
// also a field of T is a wiring error.
func LoadDerived[T any](service string, defaults T, derived []Derived, src Source) (T, error) {
	cfg := defaults
	known := map[string]reflect.Type{}
	collectKeys(reflect.TypeOf(cfg), "", known)
	for _, d := range derived {
		if _, dup := known[d.Key]; dup {
			return cfg, fmt.Errorf("settings: %s: key %s is both a settings field and a table's derived key", service, d.Key)
		}
		known[d.Key] = intType
	}
	k, err := read(service, src)
	if err != nil {
		return cfg, err
	}
	if fields := checkKeys(service, k, known); len(fields) > 0 {
		return cfg, &Error{Service: service, Fields: fields}
	}
	cfg, err = decodeInto(service, k, cfg)
	if err != nil {
		return cfg, err
	}
	values := Values{}
	var problems []Problem
	for _, d := range derived {
		n := d.Default
		if k.Exists(d.Key) {
			v, err := parseInt(fmt.Sprint(k.Get(d.Key)), intType)
			if err != nil { // checkKeys parsed it already
				return cfg, fmt.Errorf("settings: %s: %s: %w", service, d.Key, err)
			}
			n = v.(int)
		}
		if n < d.Min || n > d.Max {
			problems = append(problems, Problem{Key: d.Key, Value: n, Reason: d.Bounds})
		}
		values[d.Key] = n
	}
	if len(derived) > 0 {
		h, ok := any(&cfg).(derivedHolder)
		if !ok {
			return cfg, fmt.Errorf("settings: %s: derived keys need settings that embed settings.Transport", service)
		}
		h.setDerived(values)
	}
	problems = append(problems, validate(&cfg)...)
	if len(problems) > 0 {
		return cfg, Check(service, problems)
	}
	return cfg, nil
}

// DerivedFields are the reference rows of derived keys, sorted by key.
func DerivedFields(derived []Derived) []Field {
	out := make([]Field, 0, len(derived))
	for _, d := range derived {
		out = append(out, Field{Key: d.Key, Type: "integer", Default: fmt.Sprint(d.Default), Doc: d.Doc})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
