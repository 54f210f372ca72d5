// Package jsonstrict checks JSON for what encoding/json and PostgreSQL's
// jsonb accept silently and lose: a key written twice (the last one wins,
// the first value is gone) and, against a Go struct, a key that matches a
// field only case-insensitively.
package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// CheckKeys refuses what encoding/json would quietly accept in a request
// body: a key written twice at any depth (the last one won), and a key
// that names a field only case-insensitively ("TITLE" set title). v is the
// request's target (a pointer to a struct); its json tags are the accepted
// spellings of the top-level keys. A nil v checks only for duplicates.
func CheckKeys(body []byte, v any) error {
	names := map[string]bool{}
	if t := reflect.TypeOf(v); t != nil && t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		collectJSONNames(t.Elem(), names)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	return walkValue(dec, names, true)
}

// collectJSONNames gathers a struct's JSON keys, embedded structs' included.
func collectJSONNames(t reflect.Type, names map[string]bool) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			collectJSONNames(f.Type, names)
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
}

// walkValue reads one JSON value, checking every object in it.
func walkValue(dec *json.Decoder, names map[string]bool, top bool) error {
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			if seen[key] {
				return fmt.Errorf("key %q appears twice", key)
			}
			seen[key] = true
			if top && !names[key] {
				for n := range names {
					if strings.EqualFold(n, key) {
						return fmt.Errorf("key %q: keys are case-sensitive (did you mean %q?)", key, n)
					}
				}
			}
			if err := walkValue(dec, nil, false); err != nil {
				return err
			}
		}
		_, err = dec.Token() // }
		return err
	case json.Delim('['):
		for dec.More() {
			if err := walkValue(dec, nil, false); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ]
		return err
	}
	return nil
}
