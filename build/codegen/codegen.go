// Package codegen regenerates what is generated (sqlc code, docs/configuration.md, docs/craigctl.md, docs/tables.md) and fails when the commit holds a stale copy.
package codegen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/craig/retention/build/workspace"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
	"gopkg.in/yaml.v3"
)

// Generate regenerates the sqlc query code (go tool sqlc generate), then the generated docs (docs/configuration.md, docs/craigctl.md, docs/tables.md).
func Generate() error {
	fmt.Println("==> go tool sqlc generate")
	if err := sh.RunV(mg.GoCmd(), "tool", "sqlc", "generate"); err != nil {
		return fmt.Errorf("sqlc generate: %w", err)
	}
	return Docs()
}

// The generated documents, each written by a program of the root module:
// the configuration reference (from the settings structs and the services'
// registered tables) and craigctl's command reference (from its commands).
// They are programs of their own, not code of these targets: the services
// they document may call queries sqlc has only just generated.
var generatedDocs = []struct{ program, doc string }{
	{"./cmd/configdoc", "docs/configuration.md"},
	{"./cmd/craigctldoc", "docs/craigctl.md"},
	{"./cmd/tablesdoc", "docs/tables.md"},
}

// Docs regenerates docs/configuration.md (every key of every service: its environment variable, type, default and description), docs/craigctl.md (every craigctl command and flag) and docs/tables.md (every swept and archived table); generate runs it after sqlc.
func Docs() error {
	for _, g := range generatedDocs {
		fmt.Println("==> go run " + g.program + " " + g.doc)
		if err := sh.RunV(mg.GoCmd(), "run", g.program, g.doc); err != nil {
			return fmt.Errorf("%s: %w", g.program, err)
		}
	}
	return nil
}

// Gen groups the code-generation checks.
type Gen mg.Namespace

// Verify fails when the committed sqlc code, a generated doc (docs/configuration.md, docs/craigctl.md, docs/tables.md) or any module's go.mod/go.sum is stale.
func (Gen) Verify() error {
	mg.Deps(Generate)
	mods, err := workspace.Modules()
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range mods {
		fmt.Printf("==> go mod tidy (%s)\n", workspace.RelPath(dir))
		if err := workspace.GoIn(dir, "mod", "tidy"); err != nil {
			errs = append(errs, fmt.Errorf("go mod tidy in %s: %w", workspace.RelPath(dir), err))
		}
	}
	paths, err := generatedPaths(mods)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := changedSinceCommit(paths); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		fmt.Println("generated code and every go.mod/go.sum match the commit")
	}
	return errors.Join(errs...)
}

// changedSinceCommit fails, printing the status and the diff, when git sees
// changes (tracked or untracked) under paths.
func changedSinceCommit(paths []string) error {
	changed, err := sh.Output("git", append([]string{"status", "--porcelain", "--untracked-files=all", "--"}, paths...)...)
	if err != nil {
		return fmt.Errorf("git status: %w", err)
	}
	if changed == "" {
		return nil
	}
	fmt.Println(changed)
	if err := sh.RunV("git", append([]string{"--no-pager", "diff", "--"}, paths...)...); err != nil {
		return fmt.Errorf("git diff: %w", err)
	}
	return fmt.Errorf("stale: generated code or go.mod/go.sum differ from the commit "+
		"(run `go tool mage generate` and `go mod tidy` in the module, then commit):\n%s", changed)
}

// generatedPaths lists what gen:verify checks: every module's go.mod and
// go.sum, every sqlc output directory and the generated docs.
func generatedPaths(mods []string) ([]string, error) {
	var paths []string
	for _, dir := range mods {
		paths = append(paths, filepath.Join(dir, "go.mod"), filepath.Join(dir, "go.sum"))
	}
	outs, err := sqlcOutputDirs("sqlc.yaml")
	if err != nil {
		return nil, err
	}
	paths = append(paths, outs...)
	for _, g := range generatedDocs {
		paths = append(paths, g.doc)
	}
	return paths, nil
}

// sqlcOutputDirs returns the gen.go.out directory of every sqlc package.
func sqlcOutputDirs(config string) ([]string, error) {
	raw, err := os.ReadFile(config)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", config, err)
	}
	var cfg struct {
		SQL []struct {
			Gen struct {
				Go struct {
					Out string `yaml:"out"`
				} `yaml:"go"`
			} `yaml:"gen"`
		} `yaml:"sql"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", config, err)
	}
	var outs []string
	for _, s := range cfg.SQL {
		if s.Gen.Go.Out != "" {
			outs = append(outs, s.Gen.Go.Out)
		}
	}
	return outs, nil
}
