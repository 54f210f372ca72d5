// Package security wires the security service into the shared service
// binary: the transport sweep every service runs; archive-then-prune of the
// audit trail (audit_log, dead_letter_audit: never swept, archived after
// the hot window, then deleted) with the kernel's local archive_ledger; and
// archive_records, the fleet ledger of every service's archives, kept from
// validated archive events.
package security

import (
	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/settings"
	securitymigrations "github.com/craig/retention/migrations/security"
)

// Name is the service name (environment prefix CRAIG_SECURITY__).
const Name = "security"

// Settings are the security service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
	// Archive configures archive-then-prune of the audit trail; it is off
	// unless archive.enabled is true.
	// The tables' own keys (hot windows, retention schedules) derive from
	// ArchiveTables.
	Archive archive.Settings `koanf:"archive"`
	// Records are the records schedule's settings (records.*, ADR-073).
	Records disposition.Settings `koanf:"records"`
}

// Problems validates every key.
func (s Settings) Problems() []settings.Problem {
	return append(s.Transport.Problems(), s.Archive.Problems()...)
}

// DefaultArchiveBatchSize is security's archive.batch_size, ten times the
// specification's 1,000 (DefaultArchiveBatchSizeWhy says why; bench,
// security_archive, configuration archive_pass_batch_1000).
const DefaultArchiveBatchSize = archive.MaxBatchSize

// DefaultArchiveBatchSizeWhy is the configuration reference's reason for
// DefaultArchiveBatchSize, from the benchmark (bench/README.md).
const DefaultArchiveBatchSizeWhy = "10,000 rows, not the specification's 1,000. Audit rows are small (about 0.5 KB): at 1,000 rows a pass spends most of its time on per-archive work (two PUTs, the delete transaction, the ledger row, the event) and archived 30,074 rows/s (median of 3 rounds, bench/results/2026-12-06.json); at 10,000 an object is about 4.5 MB and the pass archived 46,753 rows/s, 1.55 times as many, at the same peak memory (70.5 MiB). bench/README.md, security archive."

// DefaultSettings returns the security defaults (archiver disabled).
func DefaultSettings() Settings {
	as := archive.DefaultSettings()
	as.BatchSize = DefaultArchiveBatchSize
	return Settings{
		Transport: settings.DefaultTransport(app.DefaultDatabaseURL(Name)),
		Archive:   as,
	}
}

// Spec is the security service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:       Name,
		Defaults:   DefaultSettings(),
		Transport:  func(s Settings) settings.Transport { return s.Transport },
		Migrations: securitymigrations.Set(),
		Locals:     app.LocalsOf[Settings](Tables{}),
		Archive: &app.ArchiveSpec[Settings]{
			Settings:   func(s Settings) archive.Settings { return s.Archive },
			Records:    func(s Settings) disposition.Settings { return s.Records },
			Tables:     ArchiveTables,
			Bookkeeper: Bookkeeper(),
		},
		Inbound: Inbound(),
	}
}
