// Command craigctldoc writes docs/craigctl.md, craigctl's command reference
// rendered from its commands (internal/craigctl). `go tool mage generate`
// runs it.
package main

import (
	"fmt"
	"os"

	"github.com/craig/retention/internal/craigctl"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: craigctldoc <output file>   (run from the repository root)")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], craigctl.Reference(), 0o644); err != nil { //nolint:gosec // a document in the repository
		fmt.Fprintln(os.Stderr, "craigctldoc:", err)
		os.Exit(1)
	}
}
