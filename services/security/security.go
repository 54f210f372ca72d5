// Package security wires the security service into the shared service
// binary: the transport sweep every service runs; archive-then-prune of the
// audit trail (audit_log, dead_letter_audit: never swept, archived after
// the hot window, then deleted) with the kernel's local archive_ledger; and
// archive_records, the fleet ledger of every service's archives, kept from
// validated archive events (seed D16).
package security

import (
	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/settings"
)

// Name is the service name (environment prefix CRAIG_SECURITY__).
const Name = "security"

// Settings are the security service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
	// Archive configures archive-then-prune of the audit trail; it is off
	// unless archive.enabled is true.
	Archive archive.Settings `koanf:"archive"`
}

// Problems validates every key.
func (s Settings) Problems() []settings.Problem {
	return append(s.Transport.Problems(), s.Archive.Problems()...)
}

// DefaultSettings returns the security defaults (archiver disabled).
func DefaultSettings() Settings {
	return Settings{
		Transport: settings.DefaultTransport(app.DefaultDatabaseURL(Name)),
		Archive:   archive.DefaultSettings(),
	}
}

// Spec is the security service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:      Name,
		Defaults:  DefaultSettings(),
		Transport: func(s Settings) settings.Transport { return s.Transport },
		Archive: &app.ArchiveSpec[Settings]{
			Settings: func(s Settings) archive.Settings { return s.Archive },
			Tables:   ArchiveTables,
			Bookkeep: Bookkeep,
		},
		Inbound: Inbound(),
	}
}
