// Package migrations embeds the goose SQL migration sets of the CRAIG
// services so that the service binaries and the magefile apply exactly the
// files in this directory.
//
// Two kinds of set exist: Transport (event_outbox and event_inbox), applied to
// every service database, and one set per service for its own tables. Each set
// is tracked in its own goose version table, so the sets version
// independently. Migrations are append-only: a file that has landed is never
// edited; add a new one.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
)

//go:embed transport archive exchange financial rules security
var files embed.FS

// Set is one independently versioned migration set.
type Set struct {
	// Name identifies the set: "transport" or a service name.
	Name string
	// VersionTable is the goose version table that tracks the set.
	VersionTable string
	// FS holds the set's NNNNN_name.sql files at its root.
	FS fs.FS
}

// TransportSetName is the name of the set applied to every service database.
const TransportSetName = "transport"

// ArchiveSetName is the name of the set every archiving service's database
// gets after its own: the kernel's local archive_ledger.
const ArchiveSetName = "archive"

// archiving lists the services that archive (their databases get the
// archive set).
var archiving = []string{"rules", "security"}

// Services lists the services that own a database, in a stable order.
var services = []string{"exchange", "financial", "rules", "security"}

// ServiceNames returns the names of the services, in a stable order.
func ServiceNames() []string { return slices.Clone(services) }

// Transport returns the outbox/inbox set applied to every service database.
func Transport() Set { return mustSet(TransportSetName) }

// Archive returns the archive_ledger set every archiving service gets after
// its own set.
func Archive() Set { return mustSet(ArchiveSetName) }

// ForService returns every set a service database needs: transport first,
// then the service's own, then (for an archiving service) the archive set.
func ForService(service string) ([]Set, error) {
	if !slices.Contains(services, service) {
		return nil, fmt.Errorf("migrations: unknown service %q (known: %v)", service, services)
	}
	sets := []Set{Transport(), mustSet(service)}
	if slices.Contains(archiving, service) {
		sets = append(sets, Archive())
	}
	return sets, nil
}

func mustSet(name string) Set {
	sub, err := fs.Sub(files, name)
	if err != nil {
		// The directory names are compile-time constants embedded above.
		panic(fmt.Sprintf("migrations: embedded set %q: %v", name, err))
	}
	return Set{Name: name, VersionTable: "goose_" + name + "_version", FS: sub}
}
