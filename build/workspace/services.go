package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/craig/retention/migrations"
)

// ServiceNames are the services of the repository: every services/<name>
// holding its binary at services/<name>/cmd/<name>, sorted. They are found
// on disk, not listed, so a new service needs no edit here (the magefile
// imports no service: generate must build before the services' queries
// are generated).
func ServiceNames() ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join("services", "*", "cmd", "*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range dirs {
		name := filepath.Base(d)
		if filepath.Base(filepath.Dir(filepath.Dir(d))) == name {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no services under services/*/cmd/*: run from the repository root")
	}
	sort.Strings(out)
	return out, nil
}

// MigrationSetsOnDisk are the sets a service's database may hold, read from
// the files the service's binary embeds: transport, the service's own, and
// the archive set (status shows it where its version table exists).
func MigrationSetsOnDisk(service string) []migrations.Set {
	return []migrations.Set{
		migrations.Transport(),
		migrations.New(service, os.DirFS(filepath.Join("migrations", service))),
		migrations.Archive(),
	}
}
