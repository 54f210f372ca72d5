//go:build mage

// Workspace tasks for the CRAIG retention toolkit, run from the repo root as
// "go tool mage <target>". Aliases: "test" runs test:all and "bench" runs
// bench:run (a mage target cannot share its name with a namespace);
// migrate:up, migrate:status and migrate:new run the migrations namespace's
// targets ("migrate" itself is a target, so `go tool mage -h migrate`
// answers).
package main

import (
	"time"
)

// Aliases gives the README's commands their short names.
var Aliases = map[string]any{
	"test":           Test.All,
	"bench":          Bench.Run,
	"migrate:up":     Migrations.Up,
	"migrate:status": Migrations.Status,
	"migrate:new":    Migrations.New,
}

const (
	// defaultServerURL is the local PostgreSQL server (any database on it).
	defaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	// defaultAMQPURL is the local RabbitMQ broker.
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// adminDatabase is the database connected to for CREATE/DROP DATABASE.
	adminDatabase = "postgres"
	// dialTimeout bounds every server probe and admin connection.
	dialTimeout = 5 * time.Second
)
