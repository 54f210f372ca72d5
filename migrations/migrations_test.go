package migrations_test

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/craig/retention/migrations"
	"github.com/craig/retention/migrations/rules"
)

// TestSets: the kernel's own sets and a service's set (its own package),
// each tracked in its own goose version table, each with its numbered
// files from 00001 on.
func TestSets(t *testing.T) {
	t.Parallel()
	for _, set := range []migrations.Set{migrations.Transport(), migrations.Archive(), rules.Set()} {
		if set.VersionTable != "goose_"+set.Name+"_version" {
			t.Errorf("%s: version table %s", set.Name, set.VersionTable)
		}
		files, err := fs.Glob(set.FS, "*.sql")
		if err != nil || len(files) == 0 || !strings.HasPrefix(files[0], "00001_") {
			t.Errorf("%s: files %v (%v)", set.Name, files, err)
		}
	}
}
