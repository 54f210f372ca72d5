// Package rules wires the rules service into the shared service binary: the
// transport sweep every service runs, and archive-then-prune of
// rule_evaluations (the ONLY copy of every evaluation's input and output)
// with its local archive_ledger and the rules.evaluations_archived event.
package rules

import (
	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/settings"
	rulesmigrations "github.com/craig/retention/migrations/rules"
)

// Name is the service name (environment prefix CRAIG_RULES__).
const Name = "rules"

// Settings are the rules service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
	// Archive configures archive-then-prune of rule_evaluations; it is off
	// unless archive.enabled is true. The tables' own keys (hot windows,
	// retention schedules) derive from ArchiveTables.
	Archive archive.Settings `koanf:"archive"`
	// Records are the records schedule's settings (records.*, ADR-073).
	Records disposition.Settings `koanf:"records"`
}

// Problems validates every key.
func (s Settings) Problems() []settings.Problem {
	return append(s.Transport.Problems(), s.Archive.Problems()...)
}

// DefaultSettings returns the rules defaults (archiver disabled).
func DefaultSettings() Settings {
	return Settings{
		Transport: settings.DefaultTransport(app.DefaultDatabaseURL(Name)),
		Archive:   archive.DefaultSettings(),
	}
}

// Spec is the rules service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:       Name,
		Defaults:   DefaultSettings(),
		Transport:  func(s Settings) settings.Transport { return s.Transport },
		Migrations: rulesmigrations.Set(),
		Locals:     app.LocalsOf[Settings](Tables{}),
		Archive: &app.ArchiveSpec[Settings]{
			Settings:   func(s Settings) archive.Settings { return s.Archive },
			Records:    func(s Settings) disposition.Settings { return s.Records },
			Tables:     ArchiveTables,
			Bookkeeper: Bookkeeper(),
		},
	}
}
