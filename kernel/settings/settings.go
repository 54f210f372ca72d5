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
	"math"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
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
	// Value is the offending value.
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
	s := fmt.Sprintf("%s=%v (env %s): %s", f.Key, f.Value, f.EnvVar, f.Reason)
	return s
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
	cfg := defaults
	k := koanf.New(".")
	if src.ConfigPath != "" {
		if err := k.Load(file.Provider(src.ConfigPath), yaml.Parser()); err != nil {
			return cfg, fmt.Errorf("settings: %s: read config file %s: %w", service, src.ConfigPath, err)
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
		return cfg, fmt.Errorf("settings: %s: read environment: %w", service, err)
	}

	known := map[string]reflect.Type{}
	collectKeys(reflect.TypeOf(cfg), "", known)
	var fields []FieldError
	keys := k.Keys()
	sort.Strings(keys)
	for _, key := range keys {
		typ, ok := known[key]
		if !ok {
			fields = append(fields, FieldError{Problem: Problem{Key: key, Value: k.Get(key), Reason: "unknown key (check its spelling against the configuration reference)"}, EnvVar: EnvVar(service, key)})
			continue
		}
		if err := decode(k.Get(key), reflect.New(typ).Interface()); err != nil {
			fields = append(fields, FieldError{Problem: Problem{Key: key, Value: k.Get(key), Reason: "not a valid " + typ.String()}, EnvVar: EnvVar(service, key)})
		}
	}
	if len(fields) > 0 {
		return cfg, &Error{Service: service, Fields: fields}
	}
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: tag, DecoderConfig: decoderConfig(&cfg)}); err != nil {
		return cfg, fmt.Errorf("settings: %s: decode: %w", service, err)
	}
	var problems []Problem
	if v, ok := any(&cfg).(Validator); ok {
		problems = v.Problems()
	} else if v, ok := any(cfg).(Validator); ok {
		problems = v.Problems()
	}
	for _, p := range problems {
		fields = append(fields, FieldError{Problem: p, EnvVar: EnvVar(service, p.Key)})
	}
	if len(fields) > 0 {
		return cfg, &Error{Service: service, Fields: fields}
	}
	return cfg, nil
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
		DecodeHook:       mapstructure.ComposeDecodeHookFunc(mapstructure.StringToTimeDurationHookFunc(), mapstructure.StringToSliceHookFunc(","), strictScalarHook),
		WeaklyTypedInput: true,
		Result:           out,
		TagName:          tag,
	}
}

// strictScalarHook refuses values that weak typing would silently convert:
// an empty string for a number or bool (it would load as 0 or false and, for
// a window, switch a sweep off), a fractional number for an integer, and a
// bool for a number.
func strictScalarHook(_ reflect.Type, to reflect.Type, data any) (any, error) {
	isInt := false
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		isInt = true
	case reflect.Float32, reflect.Float64, reflect.Bool:
	default:
		return data, nil
	}
	switch v := data.(type) {
	case string:
		if strings.TrimSpace(v) == "" {
			return nil, errors.New("empty value")
		}
	case float64:
		if isInt && v != math.Trunc(v) {
			return nil, fmt.Errorf("%v is not a whole number", v)
		}
	case bool:
		if isInt {
			return nil, fmt.Errorf("%v is not a number", v)
		}
	}
	return data, nil
}

func decode(in, out any) error {
	d, err := mapstructure.NewDecoder(decoderConfig(out))
	if err != nil {
		return err
	}
	return d.Decode(in)
}

// collectKeys walks a settings struct type and records each leaf key with its
// Go type. Embedded structs tagged ",squash" contribute their keys at the
// same level; other struct fields nest under their key.
func collectKeys(t reflect.Type, prefix string, out map[string]reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
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
			collectKeys(ft, prefix, out)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		key := prefix + name
		if ft.Kind() == reflect.Struct && ft.PkgPath() != "time" {
			collectKeys(ft, key+".", out)
			continue
		}
		out[key] = ft
	}
}
