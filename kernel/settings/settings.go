// Package settings loads and validates a service's typed configuration with
// koanf: defaults < YAML file (--config) < environment.
//
// Environment variables are CRAIG_<SERVICE>__<KEY>, upper-cased, with a
// double underscore for each level of nesting: the key
// event_outbox_retention_days of the exchange service is
// CRAIG_EXCHANGE__EVENT_OUTBOX_RETENTION_DAYS, and archive.enabled of rules is
// CRAIG_RULES__ARCHIVE__ENABLED.
//
// Loading fails fast, before anything touches a database: an unknown key, a
// value of the wrong type and a value out of bounds are all reported with the
// key, the value and the environment variable that sets it.
package settings

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// tag is the struct tag that names a settings key.
const tag = "koanf"

// Source says where a load reads from besides the defaults.
type Source struct {
	// ConfigPath is a YAML file; empty means none.
	ConfigPath string
	// Environ is the process environment as KEY=value pairs; nil means
	// os.Environ().
	Environ []string
}

// Problem is one invalid value found by a Validator.
type Problem struct {
	// Key is the offending key (dotted for nested keys).
	Key string
	// Value is the offending value; nil means it is not shown (an unknown
	// key's value may be a misspelled secret). Errors show it redacted: the
	// value of a secret key (token, secret, password …) never, a URL or DSN
	// without its password.
	Value any
	// Reason says what is wrong and what would be accepted.
	Reason string
	// Related lists other keys whose values take part in the problem (for a
	// rule between two keys); their environment variables are named too.
	Related []string
}

// Validator is implemented by settings types that check their own bounds.
type Validator interface {
	Problems() []Problem
}

// FieldError is one Problem with its environment variable.
type FieldError struct {
	Problem
	// EnvVar is the environment variable that sets Key.
	EnvVar string
}

func (f FieldError) String() string {
	if f.Value == nil {
		return fmt.Sprintf("%s (env %s): %s", f.Key, f.EnvVar, f.Reason)
	}
	return fmt.Sprintf("%s=%s (env %s): %s", f.Key, displayValue(f.Key, f.Value), f.EnvVar, f.Reason)
}

// Error is returned by Load for invalid configuration. It lists every
// problem found, not just the first.
type Error struct {
	Service string
	Fields  []FieldError
}

// ErrInvalid matches every *Error with errors.Is.
var ErrInvalid = errors.New("invalid configuration")

func (e *Error) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.String()
		for _, r := range f.Related {
			parts[i] += fmt.Sprintf(" [related: %s (env %s)]", r, EnvVar(e.Service, r))
		}
	}
	return fmt.Sprintf("settings: %s: invalid configuration: %s", e.Service, strings.Join(parts, "; "))
}

// Is reports whether target is ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// EnvPrefix is the prefix of every environment variable of a service.
func EnvPrefix(service string) string {
	return "CRAIG_" + strings.ToUpper(service) + "__"
}

// EnvVar is the environment variable that sets key for service.
func EnvVar(service, key string) string {
	return EnvPrefix(service) + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// Load returns defaults overlaid with the YAML file and then the environment,
// validated. T must be a struct whose fields carry koanf tags; if *T or T
// implements Validator its Problems are reported.
func Load[T any](service string, defaults T, src Source) (T, error) {
	return LoadDerived(service, defaults, nil, src)
}

// decodeInto overlays the loaded keys on cfg.
func decodeInto[T any](service string, k *koanf.Koanf, cfg T) (T, error) {
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: tag, DecoderConfig: decoderConfig(&cfg)}); err != nil {
		return cfg, fmt.Errorf("settings: %s: decode: %w", service, err)
	}
	return cfg, nil
}

// validate returns the Problems of cfg when it (or its pointer) is a
// Validator.
func validate[T any](cfg *T) []Problem {
	if v, ok := any(cfg).(Validator); ok {
		return v.Problems()
	}
	if v, ok := any(*cfg).(Validator); ok {
		return v.Problems()
	}
	return nil
}

// read loads the YAML file (its scalars as source text) and then the
// environment's CRAIG_<SERVICE>__ variables into one koanf tree.
func read(service string, src Source) (*koanf.Koanf, error) {
	k := koanf.New(".")
	if src.ConfigPath != "" {
		if err := k.Load(file.Provider(src.ConfigPath), rawYAML{}); err != nil {
			return nil, fmt.Errorf("settings: %s: read config file %s: %w", service, src.ConfigPath, err)
		}
	}
	prefix := EnvPrefix(service)
	environ := src.Environ
	if environ == nil {
		environ = os.Environ()
	}
	err := k.Load(env.Provider(".", env.Opt{
		Prefix:      prefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			key := strings.ToLower(strings.TrimPrefix(name, prefix))
			return strings.ReplaceAll(key, "__", "."), value
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("settings: %s: read environment: %w", service, err)
	}
	return k, nil
}

// checkKeys reports every key that is unknown (named without its value: a
// misspelled key may hold a secret) or whose value does not parse as its
// type, in key order.
func checkKeys(service string, k *koanf.Koanf, known map[string]reflect.Type) []FieldError {
	var fields []FieldError
	keys := k.Keys()
	sort.Strings(keys)
	for _, key := range keys {
		typ, ok := known[key]
		if !ok {
			fields = append(fields, FieldError{Problem: Problem{Key: key, Reason: "unknown key (check its spelling against the configuration reference; its value is not shown)"}, EnvVar: EnvVar(service, key)})
			continue
		}
		if reason := checkValue(typ, k.Get(key)); reason != "" {
			fields = append(fields, FieldError{Problem: Problem{Key: key, Value: k.Get(key), Reason: reason}, EnvVar: EnvVar(service, key)})
		}
	}
	return fields
}

// Check returns an *Error listing problems found after Load (validation a
// caller adds, such as the kernel's for the windows of a service's local
// sweeps), each with its environment variable; nil when there are none.
func Check(service string, problems []Problem) error {
	if len(problems) == 0 {
		return nil
	}
	fields := make([]FieldError, len(problems))
	for i, p := range problems {
		fields[i] = FieldError{Problem: p, EnvVar: EnvVar(service, p.Key)}
	}
	return &Error{Service: service, Fields: fields}
}

// Keys lists every settings key of T (dotted for nested keys), sorted; the
// configuration reference and its test are built from it.
func Keys[T any]() []string {
	var zero T
	known := map[string]reflect.Type{}
	collectKeys(reflect.TypeOf(zero), "", known)
	out := make([]string, 0, len(known))
	for k := range known {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func decoderConfig(out any) *mapstructure.DecoderConfig {
	return &mapstructure.DecoderConfig{
		DecodeHook:       strictHook,
		WeaklyTypedInput: false,
		Result:           out,
		TagName:          tag,
	}
}

// checkValue returns why raw is not a valid value of typ ("" when it is).
// Both sources give scalars as strings; a mapping or list where a single
// value belongs is refused too.
func checkValue(typ reflect.Type, raw any) string {
	switch raw.(type) {
	case map[string]any, []any:
		return "must be a single value, not a mapping or list"
	}
	if _, err := strictHook(nil, typ, raw); err != nil {
		return "not a valid " + typeName(typ) + ": " + err.Error()
	}
	if err := decode(raw, reflect.New(typ).Interface()); err != nil {
		return "not a valid " + typeName(typ)
	}
	return ""
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	}
	return t.String()
}

func decode(in, out any) error {
	d, err := mapstructure.NewDecoder(decoderConfig(out))
	if err != nil {
		return err
	}
	return d.Decode(in)
}

// collectKeys records each leaf key of a settings struct type with its Go
// type.
func collectKeys(t reflect.Type, prefix string, out map[string]reflect.Type) {
	walk(reflect.New(t).Elem(), prefix, func(key string, _ reflect.Type, f reflect.StructField, _ reflect.Value) {
		out[key] = f.Type
	})
}

// walk visits each leaf key of a settings struct value with the struct type
// declaring it, its field and its value. Embedded structs tagged ",squash"
// contribute their keys at the same level; other struct fields nest under
// their key.
func walk(v reflect.Value, prefix string, fn func(key string, owner reflect.Type, f reflect.StructField, val reflect.Value)) {
	for v.Kind() == reflect.Pointer {
		v = reflect.New(v.Type().Elem()).Elem()
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get(tag), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		if strings.Contains(opts, "squash") && ft.Kind() == reflect.Struct {
			walk(v.Field(i), prefix, fn)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		key := prefix + name
		if ft.Kind() == reflect.Struct && ft.PkgPath() != "time" {
			walk(v.Field(i), key+".", fn)
			continue
		}
		fn(key, t, f, v.Field(i))
	}
}

// Field is one settings key of a settings value, for a configuration
// reference generated from the structs.
type Field struct {
	Key string
	// Type is the value's kind as errors name it (integer, boolean,
	// duration, string).
	Type string
	// Default is the value shown as errors show values: a secret only as
	// set or not, a URL redacted.
	Default string
	// Owner is the struct type declaring the field, GoName the field's name
	// (where its doc comment is).
	Owner  reflect.Type
	GoName string
	// Doc is the description of a derived key (DerivedFields); a field's
	// description is its doc comment instead.
	Doc string
}

// Fields lists every key of a settings value (its defaults, typically),
// sorted by key.
func Fields(v any) []Field {
	var out []Field
	walk(reflect.ValueOf(v), "", func(key string, owner reflect.Type, f reflect.StructField, val reflect.Value) {
		def := displayValue(key, val.Interface())
		if def == "" {
			def = `""`
		}
		out = append(out, Field{Key: key, Type: typeName(f.Type), Default: def, Owner: owner, GoName: f.Name})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
