//go:build mage

// Workspace tasks for the CRAIG retention toolkit, run from the repo root as
// "go tool mage <target>". Aliases: "test" runs test:all and "bench" runs
// bench:run (a mage target cannot share its name with a namespace);
// migrate:up, migrate:status and migrate:new run the migrations namespace's
// targets ("migrate" itself is a target, so `go tool mage -h migrate`
// answers). The targets live in build/ (its own module, with the tools).
package main

import (
	//mage:import
	"github.com/craig/retention/build/bench"
	//mage:import
	_ "github.com/craig/retention/build/binaries"
	//mage:import
	_ "github.com/craig/retention/build/codegen"
	//mage:import
	_ "github.com/craig/retention/build/demo"
	//mage:import
	_ "github.com/craig/retention/build/lint"
	//mage:import
	"github.com/craig/retention/build/migrate"
	//mage:import
	_ "github.com/craig/retention/build/partition"
	//mage:import
	_ "github.com/craig/retention/build/replica"
	//mage:import
	_ "github.com/craig/retention/build/store"
	//mage:import
	"github.com/craig/retention/build/tests"
)

// Aliases gives the README's commands their short names.
var Aliases = map[string]any{
	"test":           tests.Test.All,
	"bench":          bench.Bench.Run,
	"migrate:up":     migrate.Migrations.Up,
	"migrate:status": migrate.Migrations.Status,
	"migrate:new":    migrate.Migrations.New,
}
