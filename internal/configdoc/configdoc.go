// Package configdoc renders docs/configuration.md, the configuration
// reference of every service, from the settings structs themselves: each
// key, its environment variable, type and default come from the services'
// default settings (settings.Fields), each description from the Go doc
// comment of the field that declares it. `go tool mage docs` writes it and
// `go tool mage gen:verify` fails when the committed file is stale, so the
// reference cannot drift from the code.
package configdoc

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/financial"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// ModulePath is the workspace's root module path; a package's directory is
// its import path below it.
const ModulePath = "github.com/craig/retention"

// Service is one service of the reference: its name, default settings and
// the keys its tables declare (app.Spec.DerivedKeys).
type Service struct {
	Name     string
	Defaults any
	Derived  []settings.Derived
	// DefaultWhy says, per key, why the service's default is its own
	// (written after the key's description in the service's section).
	DefaultWhy map[string]string
}

// Fleet is every service of the reference, from the services' own specs: a
// table a service registers brings its keys here with no edit.
func Fleet() []Service {
	return []Service{
		{Name: exchange.Name, Defaults: exchange.DefaultSettings(), Derived: exchange.Spec().DerivedKeys()},
		{Name: financial.Name, Defaults: financial.DefaultSettings(), Derived: financial.Spec().DerivedKeys()},
		{Name: rules.Name, Defaults: rules.DefaultSettings(), Derived: rules.Spec().DerivedKeys()},
		{Name: security.Name, Defaults: security.DefaultSettings(), Derived: security.Spec().DerivedKeys(),
			DefaultWhy: map[string]string{"archive.batch_size": security.DefaultArchiveBatchSizeWhy}},
	}
}

// Fields are a service's reference rows: its settings fields and its
// derived keys, sorted by key.
func (s Service) Fields() []settings.Field {
	out := append(settings.Fields(s.Defaults), settings.DerivedFields(s.Derived)...)
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ErrUndocumented is wrapped when a key's field has no doc comment.
var ErrUndocumented = errors.New("configdoc: undocumented settings field")

// docs caches the field comments of each parsed package directory.
type docs struct {
	root string
	pkgs map[string]map[string]string // package path → "Type.Field" → text
}

// comment returns the doc comment of owner's field.
func (d *docs) comment(f settings.Field) (string, error) {
	if f.Doc != "" {
		return f.Doc, nil
	}
	pkg := f.Owner.PkgPath()
	if _, ok := d.pkgs[pkg]; !ok {
		m, err := parseDir(filepath.Join(d.root, strings.TrimPrefix(strings.TrimPrefix(pkg, ModulePath), "/")))
		if err != nil {
			return "", err
		}
		d.pkgs[pkg] = m
	}
	text := d.pkgs[pkg][f.Owner.Name()+"."+f.GoName]
	if text == "" {
		return "", fmt.Errorf("%w: %s.%s (key %s) in %s", ErrUndocumented, f.Owner.Name(), f.GoName, f.Key, pkg)
	}
	// Go's "FieldName is …" reads as "`key` is …" in the reference.
	if rest, ok := strings.CutPrefix(text, f.GoName); ok {
		text = "`" + f.Key + "`" + rest
	}
	return text, nil
}

// parseDir reads the doc comment of every struct field declared in a
// package directory (tests excluded).
func parseDir(dir string) (map[string]string, error) {
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, path := range matches {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("configdoc: %w", err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if st, ok := ts.Type.(*ast.StructType); ok {
				fieldDocs(ts.Name.Name, st, out)
			}
			return false
		})
	}
	return out, nil
}

func fieldDocs(typeName string, st *ast.StructType, out map[string]string) {
	for _, f := range st.Fields.List {
		cg := f.Doc
		if cg == nil {
			cg = f.Comment
		}
		if cg == nil {
			continue
		}
		text := strings.Join(strings.Fields(cg.Text()), " ")
		for _, n := range f.Names {
			out[typeName+"."+n.Name] = text
		}
	}
}

// Render renders the reference of services; root is the workspace root
// (where the packages' sources are read).
func Render(root string, services []Service) ([]byte, error) {
	d := &docs{root: root, pkgs: map[string]map[string]string{}}
	fields := make([][]settings.Field, len(services))
	for i, s := range services {
		fields[i] = s.Fields()
	}
	common := commonKeys(fields)
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("\n## Keys of every service\n\n")
	b.WriteString("`<SVC>` is the service's name in upper case (for example `CRAIG_RULES__EVENT_INBOX_RETENTION_DAYS`).\n\n")
	b.WriteString("| key | environment variable | type | default | description |\n|---|---|---|---|---|\n")
	for _, f := range fields[0] {
		def, same := common[f.Key]
		if !same {
			continue
		}
		text, err := d.comment(f)
		if err != nil {
			return nil, err
		}
		if def == "" {
			def = "per service, below"
		}
		env := "CRAIG_<SVC>__" + strings.TrimPrefix(settings.EnvVar(services[0].Name, f.Key), settings.EnvPrefix(services[0].Name))
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", f.Key, env, f.Type, cell(def), cell(text))
	}
	for i, s := range services {
		if err := d.service(&b, s, fields[i], common); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// service writes a service's section: its own keys and the common keys
// whose default is its own.
func (d *docs) service(b *bytes.Buffer, s Service, fields []settings.Field, common map[string]string) error {
	name := s.Name
	fmt.Fprintf(b, "\n## %s\n\nEnvironment prefix `%s`.\n\n", name, settings.EnvPrefix(name))
	b.WriteString("| key | environment variable | type | default | description |\n|---|---|---|---|---|\n")
	for _, f := range fields {
		if def, ok := common[f.Key]; ok && def != "" {
			continue
		}
		text, err := d.comment(f)
		if err != nil {
			return err
		}
		if why := s.DefaultWhy[f.Key]; why != "" {
			text += " " + name + "'s default: " + why
		}
		fmt.Fprintf(b, "| `%s` | `%s` | %s | %s | %s |\n", f.Key, settings.EnvVar(name, f.Key), f.Type, cell(f.Default), cell(text))
	}
	return nil
}

// commonKeys: key → its default when every service has the key with one
// default, "" when every service has it with different defaults; keys not
// in every service are absent.
func commonKeys(fields [][]settings.Field) map[string]string {
	count := map[string]int{}
	defs := map[string]map[string]bool{}
	for _, fs := range fields {
		for _, f := range fs {
			count[f.Key]++
			if defs[f.Key] == nil {
				defs[f.Key] = map[string]bool{}
			}
			defs[f.Key][f.Default] = true
		}
	}
	out := map[string]string{}
	for k, n := range count {
		if n != len(fields) {
			continue
		}
		out[k] = ""
		if len(defs[k]) == 1 {
			for def := range defs[k] {
				out[k] = def
			}
		}
	}
	return out
}

// cell escapes a table cell.
func cell(s string) string {
	if s == `""` {
		return "`\"\"`"
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

const header = `# Configuration reference

<!-- Generated by ` + "`go tool mage docs`" + ` from the settings structs (internal/configdoc); do not edit.
     ` + "`go tool mage gen:verify`" + ` fails when this file is stale. -->

Every service reads its settings from its defaults, then the YAML file of
` + "`--config`" + ` (keys as below, nested at the dots), then its environment
(which wins). A value that is malformed or out of range fails the command at
load, naming the key, the value and the environment variable; an unknown key
is refused the same way. Defaults marked as secrets are shown only as set or
empty; URLs are shown without their passwords. How to choose the values:
[runbook](runbook.md); adding a table: [adding-a-table](adding-a-table.md).
`
