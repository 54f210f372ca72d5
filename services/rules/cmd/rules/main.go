// Command rules is the rules service: serve, migrate and sweep. Run it with no
// arguments for usage.
package main

import (
	"os"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/services/rules"
)

func main() { os.Exit(app.Main(rules.Spec(), os.Args[1:], os.Stdout, os.Stderr, os.Environ())) }
