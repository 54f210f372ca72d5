// Package rules embeds the rules service's own migration set (its
// NNNNN_name.sql files here); the service's app.Spec carries it.
package rules

import (
	"embed"

	"github.com/craig/retention/migrations"
)

//go:embed *.sql
var files embed.FS

// Name is the set's name: goose_rules_version tracks it.
const Name = "rules"

// Set returns the rules service's migration set.
func Set() migrations.Set { return migrations.New(Name, files) }
