//go:build mage

// Workspace tasks for the CRAIG retention toolkit, run from the repo root as
// "go tool mage <target>". Aliases: "test" runs test:all, "migrate" runs
// migrate:up and "bench" runs bench:run (a mage target cannot share its name
// with a namespace).
package main

import (
	"time"
)

// Aliases gives the README's commands their short names.
var Aliases = map[string]any{
	"test":    Test.All,
	"migrate": Migrate.Up,
	"bench":   Bench.Run,
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
