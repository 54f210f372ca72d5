package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/kerneltest"
)

// addTableTimeout bounds the whole proof: a copy, a generate and five test
// runs (four to eight minutes here, with the machine loaded); with
// CRAIG_ADDTABLE_WORK=1 (go tool mage test:addTable), go test work at the
// copy's root: every module's whole suite, about half an hour here.
const (
	addTableTimeout     = 15 * time.Minute
	addTableWorkTimeout = 80 * time.Minute
)

// The proof's environment: addTableWorkEnv=1 runs go test work in the
// copy; addTableNestedEnv is set for it, so the copy's own proof does not
// copy the copy.
const (
	addTableWorkEnv   = "CRAIG_ADDTABLE_WORK"
	addTableNestedEnv = "CRAIG_ADDTABLE_NESTED"
)

// TestAddTablesToExistingServices is the proof that a table is
// one registration: on a copy of this repository it adds swept tables to
// exchange (exchange_webhook_attempts) and financial (payment_notifications,
// whose age depends on its state: a stored generated column), and archived
// tables to rules (rule_overrides) and security (access_reviews, its third,
// about a case) from the files under testdata/addtable ONLY (a
// migration, a query file, a Go file with the table's value and a test file
// with its seed, per table: docs/adding-a-table.md's steps), runs
// `go tool mage generate`, and then every suite that walks tables: each
// module's `go test ./...`, security's fleet vocabulary and the e2e tests
// that list tables (with CRAIG_ADDTABLE_WORK=1: go test work at the copy's
// root, every module's whole suite). Nothing else is edited: the only
// files that change are the generated ones.
func TestAddTablesToExistingServices(t *testing.T) {
	t.Parallel()
	if os.Getenv(addTableNestedEnv) != "" {
		t.Skip("this is the copy the proof runs go test work in: it does not copy itself")
	}
	kerneltest.NeedsServer(t, "PostgreSQL, RabbitMQ and the S3 store")
	whole := os.Getenv(addTableWorkEnv) == "1"
	ctx, cancel := context.WithTimeout(context.Background(), addTableTimeout)
	if whole {
		ctx, cancel = context.WithTimeout(context.Background(), addTableWorkTimeout)
	}
	defer cancel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	work := t.TempDir()
	copyTracked(ctx, t, root, work)
	before := fileSums(t, work)

	overlay := filepath.Join(root, "e2e", "testdata", "addtable")
	added := copyTree(t, overlay, work)
	logDiffStat(t, work, added)
	run(ctx, t, work, "go", "tool", "mage", "generate")

	changed, created := diffSums(before, fileSums(t, work))
	for _, p := range changed {
		require.True(t, generated(p), "%s changed: only generated files may (sqlc code, docs/configuration.md, docs/tables.md)", p)
	}
	for _, p := range created {
		require.True(t, slices.Contains(added, p) || generated(p), "%s appeared", p)
	}
	doc, err := os.ReadFile(filepath.Join(work, "docs", "configuration.md"))
	require.NoError(t, err)
	tables, err := os.ReadFile(filepath.Join(work, "docs", "tables.md"))
	require.NoError(t, err)
	for _, row := range []string{"| `exchange_webhook_attempts` | exchange |", "| `payment_notifications` | financial |", "| `rule_overrides` | rules |",
		"| `access_reviews` | security |"} {
		require.Contains(t, string(tables), row, "the new tables are listed")
	}
	for _, key := range []string{"CRAIG_EXCHANGE__EXCHANGE_WEBHOOK_ATTEMPTS_RETENTION_DAYS` | integer | 14 |",
		"CRAIG_RULES__ARCHIVE__HOT_WINDOW__RULE_OVERRIDES_DAYS` | integer | 30 |", "CRAIG_RULES__ARCHIVE__RETENTION__RULE_OVERRIDES_DAYS` | integer | 2555 |",
		"CRAIG_FINANCIAL__PAYMENT_NOTIFICATIONS_RETENTION_DAYS` | integer | 45 |", "CRAIG_SECURITY__ARCHIVE__HOT_WINDOW__ACCESS_REVIEWS_DAYS` | integer | 120 |"} {
		require.Contains(t, string(doc), key, "the new tables' keys are documented")
	}

	type step struct {
		dir  string
		args []string
		env  []string
	}
	steps := []step{
		{"services/exchange", []string{"test", "-count=1", "./..."}, nil},
		{"services/financial", []string{"test", "-count=1", "./..."}, nil},
		{"services/rules", []string{"test", "-count=1", "./..."}, nil},
		{"services/security", []string{"test", "-count=1", "./..."}, nil},
		{".", []string{"test", "-count=1", "-run", "Watchdog|DryRun|EveryService|EveryPolicy|ArchiveRunCLI|Invariants", "./e2e/"}, nil},
	}
	if whole { // its templates apart from this run's
		steps = []step{{".", []string{"test", "-count=1", "-timeout", "70m", "work"}, []string{addTableNestedEnv + "=1", "CRAIG_TEST_DB_PREFIX=craig_addt"}}}
	}
	for _, step := range steps {
		start := time.Now()
		out := runEnv(ctx, t, filepath.Join(work, step.dir), step.env, "go", step.args...)
		require.NotContains(t, out, "no tests to run", step.dir)
		t.Logf("go %s in %s: %v", strings.Join(step.args, " "), step.dir, time.Since(start).Round(time.Second))
	}
}

// logDiffStat logs what the proof adds, as git diff --stat would, and the
// lines that are neither blank nor a comment.
func logDiffStat(t *testing.T, work string, added []string) {
	t.Helper()
	total, code := 0, 0
	for _, rel := range added {
		b, err := os.ReadFile(filepath.Join(work, rel))
		require.NoError(t, err)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		n := 0
		for _, l := range lines {
			l = strings.TrimSpace(l)
			if l != "" && !strings.HasPrefix(l, "//") && !strings.HasPrefix(l, "--") {
				n++
			}
		}
		total, code = total+len(lines), code+n
		t.Logf(" %s | %d +", rel, len(lines))
	}
	t.Logf(" %d files changed, %d insertions(+) (%d neither blank nor a comment)", len(added), total, code)
}

// generated: files `go tool mage generate` writes.
func generated(path string) bool {
	return path == "docs/configuration.md" || path == "docs/tables.md" || strings.Contains(path, "/internal/queries/")
}

// copyTracked copies the files git knows of (tracked, or new and not
// ignored) from root to dst: the working tree as a clone of it would be.
func copyTracked(ctx context.Context, t *testing.T, root, dst string) {
	t.Helper()
	out := run(ctx, t, root, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	for _, rel := range strings.Split(strings.TrimRight(out, "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		info, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		require.NoError(t, err)
		if !info.Mode().IsRegular() {
			continue
		}
		copyFile(t, src, filepath.Join(dst, rel), info.Mode().Perm())
	}
}

// copyTree copies every file under src into dst at the same relative path
// and returns those paths.
func copyTree(t *testing.T, src, dst string) []string {
	t.Helper()
	var rels []string
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		copyFile(t, p, filepath.Join(dst, rel), 0o644)
		rels = append(rels, filepath.ToSlash(rel))
		return nil
	}))
	return rels
}

func copyFile(t *testing.T, src, dst string, perm fs.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, b, perm))
}

// fileSums is relative path → sha256 of every file under dir.
func fileSums(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = sha256.Sum256(b)
		return nil
	}))
	return out
}

// diffSums lists the files whose content changed and those that appeared.
func diffSums(before, after map[string][32]byte) (changed, created []string) {
	for p, sum := range after {
		old, ok := before[p]
		switch {
		case !ok:
			created = append(created, p)
		case old != sum:
			changed = append(changed, p)
		}
	}
	slices.Sort(changed)
	slices.Sort(created)
	return changed, created
}

// run runs a command in dir and fails the test, with its output, if it
// fails; it returns the output.
func run(ctx context.Context, t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	return runEnv(ctx, t, dir, nil, name, args...)
}

// runEnv is run with env added to the environment.
func runEnv(ctx context.Context, t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// The copy is its own workspace; the environment's GOWORK would point
	// the go command at this checkout's.
	cmd.Env = append(append(os.Environ(), "GOWORK=", "GOFLAGS=-buildvcs=false"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "%s %s in %s:\n%s", name, strings.Join(args, " "), dir, out.String())
	return out.String()
}
