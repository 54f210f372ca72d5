// Package lint checks the whole workspace: gofmt, go vet and golangci-lint.
package lint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/craig/retention/build/workspace"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Lint fails on unformatted Go files (gofmt -l), go vet findings and golangci-lint findings (.golangci.yml) in every module and magefile.go.
func Lint() error {
	var errs []error
	if err := gofmtCheck(); err != nil {
		errs = append(errs, err)
	}
	if err := workspace.EachModule("vet", ""); err != nil {
		errs = append(errs, fmt.Errorf("go vet: %w", err))
	}
	// The fault suite's files and the failpoints build carry their own tags.
	if err := workspace.EachModule("vet", "faults,failpoints"); err != nil {
		errs = append(errs, fmt.Errorf("go vet (faults, failpoints): %w", err))
	}
	fmt.Println("==> go vet -tags mage . (magefile.go)")
	if err := sh.RunV(mg.GoCmd(), "vet", "-tags", "mage", "."); err != nil {
		errs = append(errs, fmt.Errorf("go vet magefile.go: %w", err))
	}
	if err := golangciLint(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// golangciLint runs golangci-lint (a tool directive of build/go.mod) with
// .golangci.yml in every workspace module (database tests included) and on
// magefile.go: staticcheck, errcheck, errorlint, a function-length
// limit (60 lines / 40 statements, tests and generated code excluded), a
// duplicate-code check and the formatters.
func golangciLint() error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	config := filepath.Join(root, ".golangci.yml")
	var errs []error
	if err := workspace.EachModule("tool", "", "golangci-lint", "run", "--config", config); err != nil {
		errs = append(errs, fmt.Errorf("golangci-lint: %w", err))
	}
	fmt.Println("==> go tool golangci-lint run --build-tags mage . (magefile.go)")
	if err := sh.RunV(mg.GoCmd(), "tool", "golangci-lint", "run", "--config", config, "--build-tags", "mage", "."); err != nil {
		errs = append(errs, fmt.Errorf("golangci-lint magefile.go: %w", err))
	}
	return errors.Join(errs...)
}

// gofmtCheck runs gofmt -l on every Go file git knows of (tracked, or
// untracked and not ignored).
func gofmtCheck() error {
	fmt.Println("==> gofmt -l")
	out, err := sh.Output("git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.go")
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for f := range strings.Lines(out) {
		f = strings.TrimSpace(f)
		if _, err := os.Stat(f); err == nil && !slices.Contains(files, f) {
			files = append(files, f) // skip deleted-but-tracked files and duplicates
		}
	}
	if len(files) == 0 {
		return nil
	}
	goroot, err := sh.Output(mg.GoCmd(), "env", "GOROOT")
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	unformatted, err := sh.Output(filepath.Join(goroot, "bin", "gofmt"), append([]string{"-l"}, files...)...)
	if err != nil {
		return fmt.Errorf("gofmt: %w", err)
	}
	if unformatted != "" {
		return fmt.Errorf("gofmt: these files need formatting (run gofmt -w):\n%s", unformatted)
	}
	return nil
}
