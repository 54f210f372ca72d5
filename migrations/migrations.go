// Package migrations holds the goose SQL migration sets of the CRAIG
// services, so that the service binaries apply exactly the files in this
// directory.
//
// This package embeds the kernel's own sets: Transport (event_outbox and
// event_inbox), applied to every service database, and Archive (the local
// archive_ledger), applied to every archiving service's. Each service's own
// set is a tiny package of its own beside its files (migrations/<service>),
// which only that service imports (its app.Spec carries it): the kernel
// imports no service SQL, and adding a service edits no list here. Each set
// is tracked in its own goose version table, so the sets version
// independently. Migrations are append-only: a file that has landed is never
// edited; add a new one.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
)

//go:embed transport archive
var files embed.FS

// Set is one independently versioned migration set.
type Set struct {
	// Name identifies the set: "transport", "archive" or a service name.
	Name string
	// VersionTable is the goose version table that tracks the set.
	VersionTable string
	// FS holds the set's NNNNN_name.sql files at its root.
	FS fs.FS
}

// New is the set name of the files at the root of fsys, tracked in
// goose_<name>_version: what each service's migration package returns.
func New(name string, fsys fs.FS) Set {
	return Set{Name: name, VersionTable: "goose_" + name + "_version", FS: fsys}
}

// TransportSetName is the name of the set applied to every service database.
const TransportSetName = "transport"

// ArchiveSetName is the name of the set every archiving service's database
// gets after its own: the kernel's local archive_ledger.
const ArchiveSetName = "archive"

// Transport returns the outbox/inbox set applied to every service database.
func Transport() Set { return kernelSet(TransportSetName) }

// Archive returns the archive_ledger set every archiving service gets after
// its own set.
func Archive() Set { return kernelSet(ArchiveSetName) }

func kernelSet(name string) Set {
	sub, err := fs.Sub(files, name)
	if err != nil {
		// The directory names are compile-time constants embedded above.
		panic(fmt.Sprintf("migrations: embedded set %q: %v", name, err))
	}
	return New(name, sub)
}
