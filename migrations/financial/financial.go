// Package financial embeds the financial service's own migration set (its
// NNNNN_name.sql files here); the service's app.Spec carries it.
package financial

import (
	"embed"

	"github.com/craig/retention/migrations"
)

//go:embed *.sql
var files embed.FS

// Name is the set's name: goose_financial_version tracks it.
const Name = "financial"

// Set returns the financial service's migration set.
func Set() migrations.Set { return migrations.New(Name, files) }
