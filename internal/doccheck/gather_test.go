package doccheck

import (
	"bufio"
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/services/rules"
)

// repoRoot is the repository root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return root
}

// gather collects the facts of the repository at root.
func gather(t *testing.T, root string) Facts {
	t.Helper()
	sources := sourceTexts(t, root)
	f := Facts{
		Craigctl: craigctl.Commands(),
		Service:  serviceCommands(t),
		Mage:     mageTargets(t, root),
		Metrics:  map[string]bool{},
		Alerts:   alerts(t, root),
		Words:    map[string]bool{},
		Literals: map[string]bool{},
		Exists: func(p string) bool {
			m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(p)))
			return err == nil && len(m) > 0
		},
		Anchors: func(p string) ([]string, bool) { return anchors(filepath.Join(root, filepath.FromSlash(p))) },
	}
	services, err := filepath.Glob(filepath.Join(root, "services", "*", "cmd", "*"))
	require.NoError(t, err)
	for _, s := range services {
		f.Services = append(f.Services, filepath.Base(s))
	}
	f.Keys, f.EnvVars = configKeys(t, root)
	word := regexp.MustCompile(`[a-z][a-z0-9]*(?:_[a-z0-9]+)+`)
	env := regexp.MustCompile(`CRAIG_[A-Z0-9_<>]*[A-Z0-9>]`)
	metric := regexp.MustCompile(`Name:\s+"([a-z_:]+)"`)
	literal := regexp.MustCompile(`"([a-z_.][a-z0-9_.]*)"`)
	route := regexp.MustCompile(`"((?:GET|POST|PUT|DELETE|PATCH) /[^"\s]*)"`)
	for path, text := range sources {
		for _, w := range word.FindAllString(text, -1) {
			f.Words[w] = true
		}
		if strings.HasSuffix(path, ".go") {
			for _, m := range literal.FindAllStringSubmatch(text, -1) {
				f.Literals[m[1]] = true
			}
		}
		if strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "run") {
			for _, v := range env.FindAllString(text, -1) {
				if !strings.HasSuffix(v, ">") { // CRAIG_<SVC>__<KEY> names nothing in particular
					f.EnvVars = append(f.EnvVars, v)
				}
			}
		}
		for _, m := range metric.FindAllStringSubmatch(text, -1) {
			f.Metrics[m[1]] = true
		}
		for _, m := range route.FindAllStringSubmatch(text, -1) {
			f.Routes = append(f.Routes, m[1])
		}
	}
	require.NotEmpty(t, f.Metrics, "no metric registrations found")
	require.NotEmpty(t, f.Routes, "no routes found")
	return f
}

// sourceTexts are the repository's sources by path: Go, SQL, YAML, JSON
// and .ci/run (documents, testdata and generated docs excluded).
func sourceTexts(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules", "bin":
				return filepath.SkipDir
			}
			if p == filepath.Join(root, "internal", "doccheck") {
				return filepath.SkipDir // its tests plant dangling names
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".sql", ".yml", ".yaml", ".json":
		default:
			if !strings.HasSuffix(p, filepath.Join(".ci", "run")) {
				return nil
			}
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = string(raw)
		return nil
	})
	require.NoError(t, err)
	return out
}

// configKeys reads the keys and variables of the generated configuration
// reference (gen:verify keeps it current).
func configKeys(t *testing.T, root string) (keys, envs []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	require.NoError(t, err)
	row := regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]+)` \\|")
	for line := range strings.Lines(string(raw)) {
		if m := row.FindStringSubmatch(line); m != nil {
			keys = append(keys, m[1])
			envs = append(envs, m[2])
		}
	}
	require.NotEmpty(t, keys, "no keys in docs/configuration.md")
	return keys, envs
}

// serviceCommands asks a service binary (rules: it archives, so it has
// every command) for its commands and each command's flags.
func serviceCommands(t *testing.T) map[string][]string {
	t.Helper()
	ctx := context.Background()
	var usage bytes.Buffer
	app.Run(ctx, rules.Spec(), []string{"-h"}, &usage, &usage, nil)
	out := map[string][]string{}
	cmd := regexp.MustCompile(`^  ([a-z]+(?: run| index-subjects)?)\b`)
	flag := regexp.MustCompile(`^\s+-([a-z][a-z0-9-]*)`)
	for line := range strings.Lines(usage.String()) {
		m := cmd.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var help bytes.Buffer
		app.Run(ctx, rules.Spec(), append(strings.Fields(m[1]), "-h"), &help, &help, nil)
		for l := range strings.Lines(help.String()) {
			if fm := flag.FindStringSubmatch(l); fm != nil {
				out[m[1]] = append(out[m[1]], fm[1])
			}
		}
		out[m[1]] = append(out[m[1]], "config")
	}
	require.Contains(t, out, "sweep", "the service usage lists no commands:\n%s", usage.String())
	return out
}

// mageTargets are `go tool mage -l`'s targets and magefile.go's aliases.
func mageTargets(t *testing.T, root string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "tool", "mage", "-l")
	cmd.Dir = root
	raw, err := cmd.Output()
	require.NoError(t, err, "go tool mage -l")
	out := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	listing := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Targets:") {
			listing = true
			continue
		}
		if fields := strings.Fields(line); listing && len(fields) > 0 {
			out[strings.TrimSuffix(fields[0], "*")] = true
		}
	}
	magefile, err := os.ReadFile(filepath.Join(root, "magefile.go"))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`(?m)^\s+"([a-z:]+)":`).FindAllStringSubmatch(string(magefile), -1) {
		out[m[1]] = true
	}
	require.True(t, out["store:up"] && out["test"], "mage targets not found: %v", out)
	return out
}

// anchors are the heading anchors of a markdown file.
func anchors(path string) ([]string, bool) {
	if filepath.Ext(path) != ".md" {
		return nil, false
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	var out []string
	inBlock := false
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
		}
		if !inBlock && strings.HasPrefix(line, "#") {
			out = append(out, Anchor(strings.TrimLeft(line, "# \n")))
		}
	}
	return out, true
}

// alerts are the alert names of the shipped Prometheus rule files.
func alerts(t *testing.T, root string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "prometheus", "*.yml"))
	require.NoError(t, err)
	out := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?m)^\s*- alert:\s*(\w+)`).FindAllStringSubmatch(string(raw), -1) {
			out[m[1]] = true
		}
	}
	require.NotEmpty(t, out, "no alerts in deploy/prometheus")
	return out
}
