package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
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
	require.Empty(t, all, "documents name what does not exist (fix the document, or the name):\n%s", strings.Join(all, "\n"))
}

// TestCheckFindsDanglingNames plants one dangling name of every kind beside
// a real one of the same kind: each dangling one is found, no real one is.
func TestCheckFindsDanglingNames(t *testing.T) {
	t.Parallel()
	facts := gather(t, repoRoot(t))
	cases := []struct{ kind, good, bad, name string }{
		{"command", "`craigctl archive fetch rule_evaluations --id 1`", "`craigctl archive fetchall`", "craigctl archive fetchall"},
		{"flag", "`craigctl archive verify --deep`", "`craigctl archive verify --shallow`", "craigctl archive verify --shallow"},
		{"command", "`rules sweep --once`", "`rules sweepall`", "<svc> sweepall"},
		{"flag", "`<svc> invariants --gate`", "`<svc> invariants --gated`", "<svc> invariants --gated"},
		{"target", "`go tool mage store:up`", "`go tool mage store:upp`", "store:upp"},
		{"key", "`archive.enabled`", "`archive.enabled_really`", "archive.enabled_really"},
		{"key", "`archive.hot_window.<table>_days`", "`archive.retention.<table>_years`", "archive.retention.<table>_years"},
		{"env", "`CRAIG_RULES__ARCHIVE__ENABLED`", "`CRAIG_RULES__ARCHIVE__ENABLE`", "CRAIG_RULES__ARCHIVE__ENABLE"},
		{"metric", "`retention_prune_capped_total{table}`", "`retention_prune_cappd_total`", "retention_prune_cappd_total"},
		{"route", "`GET /admin/archive/rows/{table}/{id}`", "`GET /admin/archive/row/{table}/{id}`", "/admin/archive/row/{table}/{id}"},
		{"path", "`kernel/prune/prune.go`", "`kernel/prune/pruner.go`", "kernel/prune/pruner.go"},
		{"path", "`services/<name>/cmd/<name>`", "`magefiles/`", "magefiles/"},
		{"word", "`event_outbox`", "`event_outbox_archive`", "event_outbox_archive"},
		{"link", "[adding](adding-a-table.md)", "[adding](adding-a-tables.md)", "adding-a-tables.md"},
		{"link", "[tests](testing.md#the-fault-suite)", "[tests](testing.md#the-faults-suite)", "testing.md#the-faults-suite"},
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
	t.Run("fenced block", func(t *testing.T) {
		t.Parallel()
		got := Check("docs/x.md", "```sh\ncraigctl archive purge --limit 10 --force\n```\n`--force` in prose\n", facts)
		require.Equal(t, []Finding{{File: "docs/x.md", Line: 2, Kind: "flag", Name: "craigctl archive purge --force"}}, got)
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
