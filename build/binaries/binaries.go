// Package binaries builds the repository's programs into bin/: every
// service binary, craigctl and the records console.
package binaries

import (
	"fmt"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	"github.com/craig/retention/build/workspace"
)

// Build compiles every service binary, craigctl and the console into bin/ (bin/exchange, bin/financial, bin/rules, bin/security, bin/craigctl, bin/console).
func Build() error {
	names, err := workspace.ServiceNames()
	if err != nil {
		return err
	}
	for _, service := range names {
		if err := build(workspace.ServiceBinary(service), "./services/"+service+"/cmd/"+service); err != nil {
			return err
		}
	}
	if err := build(workspace.Binary("craigctl"), "./cmd/craigctl"); err != nil {
		return err
	}
	return build(workspace.Binary("console"), "./cmd/console")
}

func build(out, pkg string) error {
	fmt.Printf("==> go build -o %s %s\n", out, pkg)
	if err := sh.RunV(mg.GoCmd(), "build", "-o", out, pkg); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}
