// Package rules wires the rules service into the shared service binary: the
// transport sweep every service runs, and archive-then-prune of
// rule_evaluations (the ONLY copy of every evaluation's input and output)
// with its local archive_ledger and the rules.evaluations_archived event.
package rules

import (
	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/settings"
)

// Name is the service name (environment prefix CRAIG_RULES__).
const Name = "rules"

// Settings are the rules service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
	// Archive configures archive-then-prune of rule_evaluations; it is off
	// unless archive.enabled is true.
	Archive ArchiveSettings `koanf:"archive"`
}

// ArchiveSettings are the kernel's archive settings and rules' retention
// schedule.
type ArchiveSettings struct {
	archive.Settings `koanf:",squash"`
	Retention        Retention `koanf:"retention"`
}

// Retention is the retention schedule of rules' archives (days after an
// archive's newest record it becomes purgeable; 0: no date, never
// purgeable, the default: the schedule is the records officer's to set).
type Retention struct {
	// RuleEvaluationsDays: a rule_evaluations archive becomes purgeable this
	// many days after its newest record (0: never; the records officer sets
	// it).
	RuleEvaluationsDays int `koanf:"rule_evaluations_days"`
}

// Problems validates every key.
func (s Settings) Problems() []settings.Problem {
	return append(s.Transport.Problems(), s.Archive.Problems()...)
}

// DefaultSettings returns the rules defaults (archiver disabled).
func DefaultSettings() Settings {
	return Settings{
		Transport: settings.DefaultTransport(app.DefaultDatabaseURL(Name)),
		Archive:   ArchiveSettings{Settings: archive.DefaultSettings()},
	}
}

// Spec is the rules service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:      Name,
		Defaults:  DefaultSettings(),
		Transport: func(s Settings) settings.Transport { return s.Transport },
		Archive: &app.ArchiveSpec[Settings]{
			Settings: func(s Settings) archive.Settings { return s.Archive.Settings },
			Tables:   ArchiveTables,
			Bookkeep: Bookkeep,
			Retention: func(s Settings) map[string]int {
				return map[string]int{EvaluationsTable: s.Archive.Retention.RuleEvaluationsDays}
			},
		},
	}
}
