// Package security embeds the security service's own migration set (its
// NNNNN_name.sql files here); the service's app.Spec carries it.
package security

import (
	"embed"

	"github.com/craig/retention/migrations"
)

//go:embed *.sql
var files embed.FS

// Name is the set's name: goose_security_version tracks it.
const Name = "security"

// Set returns the security service's migration set.
func Set() migrations.Set { return migrations.New(Name, files) }
