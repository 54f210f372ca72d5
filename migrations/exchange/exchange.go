// Package exchange embeds the exchange service's own migration set (its
// NNNNN_name.sql files here); the service's app.Spec carries it.
package exchange

import (
	"embed"

	"github.com/craig/retention/migrations"
)

//go:embed *.sql
var files embed.FS

// Name is the set's name: goose_exchange_version tracks it.
const Name = "exchange"

// Set returns the exchange service's migration set.
func Set() migrations.Set { return migrations.New(Name, files) }
