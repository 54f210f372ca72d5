// Command tablesdoc writes docs/tables.md, every table each service sweeps
// or archives (internal/tablesdoc). `go tool mage generate` runs it after
// sqlc, as a separate program: the services it documents may use queries
// sqlc has only just generated.
package main

import (
	"fmt"
	"os"

	"github.com/craig/retention/internal/tablesdoc"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tablesdoc <output file>   (run from the repository root)")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], tablesdoc.Render(tablesdoc.Fleet()), 0o644); err != nil { //nolint:gosec // a document in the repository
		fmt.Fprintln(os.Stderr, "tablesdoc:", err)
		os.Exit(1)
	}
}
