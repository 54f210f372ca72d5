// Package workspace is what the build targets share: the workspace's modules
// and services, the local servers' addresses, and running go in a module.
package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Modules returns the directory of every module of go.work.
func Modules() ([]string, error) {
	work, err := sh.Output(mg.GoCmd(), "env", "GOWORK")
	if err != nil {
		return nil, fmt.Errorf("go env GOWORK: %w", err)
	}
	if work == "" || work == "off" {
		return nil, errors.New("not in workspace mode (GOWORK is off or go.work is missing): run from the repo root")
	}
	out, err := sh.Output(mg.GoCmd(), "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return nil, fmt.Errorf("go list -m: %w", err)
	}
	var dirs []string
	for d := range strings.Lines(out) {
		if d = strings.TrimSpace(d); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

// GoIn runs `go <args>` in dir, printing output live.
func GoIn(dir string, args ...string) error {
	return sh.RunV(mg.GoCmd(), append([]string{"-C", dir}, args...)...)
}

// RelPath shows a path relative to the working directory when it can.
func RelPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	return rel
}

func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
