// Command configdoc writes docs/configuration.md, the configuration
// reference of every service (internal/configdoc). `go tool mage generate`
// runs it after sqlc, as a separate program: the services it documents may
// use queries sqlc has only just generated.
package main

import (
	"fmt"
	"os"

	"github.com/craig/retention/internal/configdoc"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: configdoc <output file>   (run from the repository root)")
		os.Exit(2)
	}
	doc, err := configdoc.Render(".", configdoc.Fleet())
	if err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], doc, 0o644); err != nil { //nolint:gosec // a document in the repository
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}
