package settings

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Every value reaches the decoder as the text the operator wrote: the
// environment gives strings, and rawYAML keeps each YAML scalar's source
// text instead of letting the YAML library resolve it (YAML 1.1 reads 030
// as octal 24, 0x10 as 16 and 1_0 as 10). strictHook then parses that text
// the one way this package documents, for both sources alike.
var (
	// decimalInt is an integer in plain base-10 digits with an optional
	// sign. A leading zero is refused rather than guessed at: 030 may have
	// meant octal 24 or decimal 30, and a window must never be a guess.
	decimalInt = regexp.MustCompile(`^[+-]?(0|[1-9][0-9]*)$`)
	// decimalFloat is a plain decimal number (no hex, no inf or nan).
	decimalFloat = regexp.MustCompile(`^[+-]?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
	// durationUnit is present in every accepted duration: a bare number
	// would be nanoseconds to time.ParseDuration's callers (30000000 = 30 ms).
	durationUnit = regexp.MustCompile(`[a-zµμ]`)
)

var durationType = reflect.TypeFor[time.Duration]()

// rawYAML is a koanf parser that keeps every scalar as its source text. It
// refuses a file holding more than one YAML document (a second document
// would otherwise be ignored silently) and duplicate keys.
type rawYAML struct{}

func (rawYAML) Unmarshal(b []byte) (map[string]any, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]any{}, nil // an empty file sets no keys
		}
		return nil, fmt.Errorf("yaml: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("yaml: the file holds more than one document (line %d starts another); put every key in one document", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	if len(doc.Content) == 0 {
		return map[string]any{}, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return map[string]any{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("yaml: line %d: the document must be a mapping of keys to values", root.Line)
	}
	v, err := rawNode(root, "")
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

func (rawYAML) Marshal(map[string]any) ([]byte, error) {
	return nil, errors.New("settings: writing YAML is not supported")
}

// rawNode converts a YAML node to maps, slices and scalar source strings. A
// null scalar becomes "" so the strict hook reports it as an empty value.
// An alias (*name) is refused: one that names its own container never ends,
// and a few nested ones expand to billions of nodes (FuzzLoad found the
// first), while a settings file has no need to repeat a value by reference.
func rawNode(n *yaml.Node, path string) (any, error) {
	if n.Kind == yaml.AliasNode {
		return nil, fmt.Errorf("yaml: line %d: aliases (*%s) are not supported; write the value out", n.Line, n.Value)
	}
	switch n.Kind {
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind == yaml.AliasNode {
				return nil, fmt.Errorf("yaml: line %d: aliases (*%s) are not supported; write the key out", k.Line, k.Value)
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("yaml: line %d: keys must be plain names", k.Line)
			}
			if k.Value == "<<" {
				return nil, fmt.Errorf("yaml: line %d: merge keys (<<) are not supported; write each key out", k.Line)
			}
			key := strings.ToLower(k.Value)
			v, err := rawNode(n.Content[i+1], path+key+".")
			if err != nil {
				return nil, err
			}
			if err := insertKey(out, key, v, path, k.Line); err != nil {
				return nil, err
			}
		}
		return out, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := rawNode(c, path)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	default:
		return nil, fmt.Errorf("yaml: line %d: unsupported value", n.Line)
	}
}

// strictHook parses a string (the only scalar either source produces) into
// the field's type by this package's rules:
//   - integers: plain base-10 digits, optional sign, no leading zero, no
//     prefix (0x, 0o), no underscore, within the type's range;
//   - booleans: true or false (any case), nothing else;
//   - durations: Go duration syntax with a unit on every number (30s, 1m30s);
//   - floats: plain decimal;
//   - an empty value is refused for all of these (it would load as 0 or
//     false and, for a window, switch a sweep off).
func strictHook(_ reflect.Type, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok {
		return data, nil
	}
	if to == durationType {
		return parseDuration(s)
	}
	switch to.Kind() {
	case reflect.String:
		return s, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return parseInt(s, to)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return parseUint(s, to)
	case reflect.Bool:
		return parseBool(s)
	case reflect.Float32, reflect.Float64:
		return parseFloat(s, to)
	}
	return data, nil
}

func parseInt(s string, to reflect.Type) (any, error) {
	if err := checkInt(s, false); err != nil {
		return nil, err
	}
	v, err := strconv.ParseInt(strings.TrimPrefix(s, "+"), 10, to.Bits())
	if err != nil {
		return nil, fmt.Errorf("%s is out of range for this key", s)
	}
	return reflect.ValueOf(v).Convert(to).Interface(), nil
}

func parseUint(s string, to reflect.Type) (any, error) {
	if err := checkInt(s, true); err != nil {
		return nil, err
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "+"), 10, to.Bits())
	if err != nil {
		return nil, fmt.Errorf("%s is out of range for this key", s)
	}
	return reflect.ValueOf(v).Convert(to).Interface(), nil
}

func parseBool(s string) (any, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	case "":
		return nil, errors.New("empty value")
	}
	return nil, errors.New("must be true or false")
}

func parseFloat(s string, to reflect.Type) (any, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty value")
	}
	if !decimalFloat.MatchString(s) {
		return nil, errors.New("must be a plain decimal number")
	}
	v, err := strconv.ParseFloat(s, to.Bits())
	if err != nil {
		return nil, fmt.Errorf("%s is out of range for this key", s)
	}
	return reflect.ValueOf(v).Convert(to).Interface(), nil
}

func checkInt(s string, unsigned bool) error {
	switch {
	case strings.TrimSpace(s) == "":
		return errors.New("empty value")
	case !decimalInt.MatchString(s):
		if len(s) > 1 && (s[0] == '0' || ((s[0] == '+' || s[0] == '-') && len(s) > 2 && s[1] == '0')) && decimalInt.MatchString(strings.TrimLeft(strings.TrimLeft(s, "+-"), "0")) {
			return errors.New("a leading zero is refused (030 could mean octal 24 or decimal 30): write the number without it")
		}
		return errors.New("must be a whole number in plain decimal digits (no 0x/0o prefix, underscores, fractions or units)")
	case unsigned && strings.HasPrefix(s, "-"):
		return errors.New("must not be negative")
	}
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty value")
	}
	if !durationUnit.MatchString(t) {
		return 0, errors.New("a duration needs a unit (such as 30s, 500ms or 1m): a bare number is ambiguous")
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, errors.New("must be a duration such as 30s, 500ms or 1m")
	}
	return d, nil
}

// insertKey puts v under key in out. A dotted key (archive.enabled: true)
// means exactly what the nested form means (archive: {enabled: true}): it is
// split into its segments and merged into the same tree, so a setting's
// written shape never decides whether it applies. The same setting written
// twice, in either form or both, is refused, as is a dotted key with an
// empty segment.
func insertKey(out map[string]any, key string, v any, path string, line int) error {
	segs := strings.Split(key, ".")
	for _, seg := range segs {
		if seg == "" {
			return fmt.Errorf("yaml: line %d: key %q has an empty segment; write nested keys as %q or nest them", line, path+key, "section.key")
		}
	}
	m := out
	for i, seg := range segs[:len(segs)-1] {
		next, ok := m[seg]
		if !ok {
			sub := map[string]any{}
			m[seg] = sub
			m = sub
			continue
		}
		sub, isMap := next.(map[string]any)
		if !isMap {
			return fmt.Errorf("yaml: line %d: key %q: %q is set as a value elsewhere in the file and cannot also hold keys", line, path+key, path+strings.Join(segs[:i+1], "."))
		}
		m = sub
	}
	last := segs[len(segs)-1]
	prev, dup := m[last]
	if !dup {
		m[last] = v
		return nil
	}
	pm, prevMap := prev.(map[string]any)
	vm, newMap := v.(map[string]any)
	if !prevMap || !newMap {
		return fmt.Errorf("yaml: line %d: key %q is set twice (once nested, once dotted, or twice alike); keep one", line, path+key)
	}
	for k, sub := range vm {
		if err := insertKey(pm, k, sub, path+key+".", line); err != nil {
			return err
		}
	}
	return nil
}
