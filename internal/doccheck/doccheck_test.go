package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// documents are the repository's markdown pages a reader follows: every
// one but the changelog, which records what was.
func documents(t *testing.T, root string) []string {
	t.Helper()
	var docs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, p)
		if filepath.Ext(p) == ".md" && rel != "CHANGELOG.md" {
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	return docs
}

func TestDocsNameOnlyWhatExists(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	facts := gather(t, root)
	docs := documents(t, root)
	require.Contains(t, docs, "README.md")
	var all []string
	for _, doc := range docs {
		raw, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		for _, f := range Check(doc, string(raw), facts) {
			all = append(all, f.String())
		}
	}
	// The alert rules' runbook annotations point into the documents too.
	rules, err := filepath.Glob(filepath.Join(root, "deploy", "prometheus", "*.yml"))
	require.NoError(t, err)
	for _, file := range rules {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, file)
		for _, m := range docRef.FindAllStringSubmatch(string(raw), -1) {
			for _, f := range CheckLink(filepath.ToSlash(rel), m[1], facts) {
				all = append(all, f.String())
			}
		}
	}
	require.Empty(t, all, "documents name what does not exist (fix the document, or the name):\n%s", strings.Join(all, "\n"))
}

// docRef is a reference to a repository document in a non-markdown file.
var docRef = regexp.MustCompile(`([A-Za-z0-9_./-]+\.md(?:#[a-z0-9_-]+)?)`)

// TestCheckFindsDanglingNames plants one dangling name of every kind beside
// a real one of the same kind: each dangling one is found, no real one is.
func TestCheckFindsDanglingNames(t *testing.T) {
	t.Parallel()
	facts := gather(t, repoRoot(t))
	cases := []struct{ kind, good, bad, name string }{
		{"command", "`craigctl archive fetch rule_evaluations --id 1`", "`craigctl archive fetchall`", "craigctl archive fetchall"},
		{"command", "`./bin/craigctl archive verify`", "`./bin/craigctl archive fetchall`", "craigctl archive fetchall"},
		{"command", "`CRAIG_TOKEN=x craigctl archive verify`", "`echo x | craigctl archive fetchall`", "craigctl archive fetchall"},
		{"flag", "`craigctl archive verify --deep`", "`craigctl archive verify --shallow`", "craigctl archive verify --shallow"},
		{"flag", "`craigctl archive fetch t --id 1 -o f`", "`craigctl archive verify -z`", "craigctl archive verify -z"},
		{"command", "`rules sweep --once`", "`rules sweepall`", "<svc> sweepall"},
		{"flag", "`<svc> invariants --gate`", "`<svc> invariants --gated`", "<svc> invariants --gated"},
		{"flag", "`go run ./services/rules/cmd/rules sweep -once`", "`go run ./services/rules/cmd/rules sweep -twice`", "<svc> sweep -twice"},
		{"target", "`go tool mage store:up`", "`go tool mage store:upp`", "store:upp"},
		{"target", "`go tool mage -v test:service rules`", "`go tool mage store:up store:upp`", "store:upp"},
		{"target", "`go tool mage -h migrate`", "`go tool mage -h migrat`", "migrat"},
		{"key", "`archive.enabled`", "`archive.enabled_really`", "archive.enabled_really"},
		{"key", "`archive.hot_window.<table>_days`", "`archive.retention.<table>_years`", "archive.retention.<table>_years"},
		{"key", "`archive.hot_window_days=5`", "`archiv.hot_window_days`", "archiv.hot_window_days"},
		{"env", "`CRAIG_RULES__ARCHIVE__ENABLED`", "`CRAIG_RULES__ARCHIVE__ENABLE`", "CRAIG_RULES__ARCHIVE__ENABLE"},
		{"metric", "`retention_prune_capped_total{table}`", "`retention_prune_cappd_total`", "retention_prune_cappd_total"},
		{"metric", "`rate(retention_prune_capped_total[5m])`", "`rate(retention_prune_bogus_total[5m])`", "retention_prune_bogus_total"},
		{"alert", "`RetentionPruneCapped`", "`RetentionSweepStalledd`", "RetentionSweepStalledd"},
		{"route", "`GET /admin/archive/rows/{table}/{id}`", "`GET /admin/archive/row/{table}/{id}`", "GET /admin/archive/row/{table}/{id}"},
		{"route", "`POST /admin/archive/holds`", "`DELETE /admin/archive/holds`", "DELETE /admin/archive/holds"},
		{"route", "`curl -s localhost:8081/admin/retention`", "`curl -s localhost:8081/admin/archive/row/x`", "/admin/archive/row/x"},
		{"path", "`kernel/prune/prune.go`", "`kernel/prune/pruner.go`", "kernel/prune/pruner.go"},
		{"path", "`kernel/prune/prune.go:42`", "`kernel/prune/pruner.go:42`", "kernel/prune/pruner.go:42"},
		{"path", "`go test ./kernel/prune/...`", "`go test ./kernel/prunee/...`", "./kernel/prunee/..."},
		{"path", "`services/<name>/cmd/<name>`", "`magefiles/`", "magefiles/"},
		{"word", "`event_outbox`", "`event_outbox_archive`", "event_outbox_archive"},
		{"word", "`audit_log_hot_window_overrun`", "`audit_log_hot_window_overrunn`", "audit_log_hot_window_overrunn"},
		{"link", "[adding](adding-a-table.md)", "[adding](adding-a-tables.md)", "adding-a-tables.md"},
		{"link", "[tests](testing.md#the-fault-suite)", "[tests](testing.md#the-faults-suite)", "testing.md#the-faults-suite"},
		{"link", `[x](testing.md "title")`, `[x](nothere.md "title")`, "nothere.md"},
		{"link", "[ref]: testing.md", "[ref]: nothere.md", "nothere.md"},
		{"link", `<a href="testing.md">x</a>`, `<a href="nothere.md">x</a>`, "nothere.md"},
	}
	for _, c := range cases {
		t.Run(c.kind+"/"+c.name, func(t *testing.T) {
			t.Parallel()
			require.Empty(t, Check("docs/x.md", c.good+"\n", facts), "a real %s is reported", c.kind)
			got := Check("docs/x.md", "text\n"+c.bad+"\n", facts)
			require.Len(t, got, 1, "%v", got)
			require.Equal(t, Finding{File: "docs/x.md", Line: 2, Kind: c.kind, Name: c.name}, got[0])
		})
	}
	blocks := []struct{ name, doc string }{
		{"sh", "```sh\ncraigctl archive purge --limit 10 --force\n```\n`--force` in prose\n"},
		{"tilde fence and a prompt", "~~~\n$ craigctl archive purge --force\n~~~\n"},
		{"path in a block", "```\n$ cat magefiles/main.go\n```\n"},
		{"yaml settings", "```yaml\narchive:\n  enabled: true\n  hot_window_dayz: 3\n```\n"},
	}
	for _, b := range blocks {
		t.Run("block/"+b.name, func(t *testing.T) {
			t.Parallel()
			require.Len(t, Check("docs/x.md", b.doc, facts), 1, "%v", Check("docs/x.md", b.doc, facts))
		})
	}
	t.Run("yaml of another kind is not settings", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, Check("docs/x.md", "```yaml\nservices:\n  - {name: rules, url: x}\n```\n", facts))
	})
}

// TestLayoutNamesEveryPackage: the Layout section of docs/architecture.md
// names every directory holding a Go package (directly or by a
// <placeholder> line), and every path it names exists.
func TestLayoutNamesEveryPackage(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	layout := layoutPaths(t, string(raw))
	for _, p := range layout {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(globOf(strings.TrimSuffix(p, "/")))))
		require.NoError(t, err)
		require.NotEmpty(t, m, "the layout names %s, which does not exist", p)
	}
	for _, dir := range packageDirs(t, root) {
		named := slices.ContainsFunc(layout, func(p string) bool {
			p = strings.TrimSuffix(p, "/")
			return p == dir || placeholderMatch(p, dir)
		})
		require.True(t, named, "package directory %s is not in docs/architecture.md's Layout section", dir)
	}
}

// layoutPaths are the first words of the Layout section's code block.
func layoutPaths(t *testing.T, doc string) []string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Layout\n")
	require.True(t, ok, "docs/architecture.md has no ## Layout section")
	_, block, ok := strings.Cut(section, "```\n")
	require.True(t, ok)
	block, _, _ = strings.Cut(block, "```")
	var paths []string
	for line := range strings.Lines(block) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(line, " ") {
			paths = append(paths, f[0])
		}
	}
	return paths
}

// packageDirs are the directories holding non-test Go files, relative to
// root (testdata excluded).
func packageDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			if rel != "." { // the root holds only magefile.go
				seen[filepath.ToSlash(rel)] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	var dirs []string
	for d := range seen {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	return dirs
}
