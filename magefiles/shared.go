//go:build mage

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// workspaceModules returns the directory of every module of go.work.
func workspaceModules() ([]string, error) {
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

// goIn runs `go <args>` in dir, printing output live.
func goIn(dir string, args ...string) error {
	return sh.RunV(mg.GoCmd(), append([]string{"-C", dir}, args...)...)
}

// relPath shows a path relative to the working directory when it can.
func relPath(path string) string {
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

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
