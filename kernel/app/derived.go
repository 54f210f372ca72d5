package app

import (
	"fmt"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/settings"
)

// DerivedKeys are the settings keys a service's tables declare, derived from
// its registration (no settings field, default or reference row is written
// by hand): each local table's <table>_retention_days and each archived
// table's archive.hot_window.<table>_days and archive.retention.<table>_days.
func (s Spec[T]) DerivedKeys() []settings.Derived {
	var out []settings.Derived
	for _, l := range s.Locals {
		table := l.Sweep.Table
		doc := l.Doc
		if doc == "" {
			doc = fmt.Sprintf("Days a row of `%s` is kept after its `%s` before the sweep deletes it, if it matches `%s` (rows that must be kept never do)", table, l.Sweep.AgeColumn, l.Sweep.Eligible)
		}
		out = append(out, settings.Derived{
			Key: WindowKey(table), Default: l.defaultWindow(), Min: 0, Max: settings.MaxRetentionDays,
			Bounds: fmt.Sprintf("must be between 0 (sweep disabled) and %d days", settings.MaxRetentionDays),
			Doc:    doc + "; 0 disables the sweep.",
		})
	}
	if s.Archive == nil {
		return out
	}
	for _, t := range s.Archive.Tables() {
		out = append(out,
			settings.Derived{
				Key: HotWindowKey(t.Table), Default: t.HotWindowDays, Min: 0, Max: archive.MaxHotWindowDays,
				Bounds: fmt.Sprintf("must be between 0 (the service's archive.hot_window_days) and %d days", archive.MaxHotWindowDays),
				Doc:    fmt.Sprintf("`%s`'s own hot window: rows older than this many days (by `%s`) are archived; 0 uses `archive.hot_window_days`.", t.Table, t.AgeColumn),
			},
			settings.Derived{
				Key: RetentionKey(t.Table), Default: t.RetentionDays, Min: 0, Max: lifecycle.MaxRetentionDays,
				Bounds: fmt.Sprintf("must be between 0 (no date: never purgeable) and %d days", lifecycle.MaxRetentionDays),
				Doc:    fmt.Sprintf("An archive of `%s` becomes purgeable this many days after its newest record; 0: no date, never purgeable (the records officer sets it).", t.Table),
			})
	}
	return out
}

// LoadSettings loads a service's settings with its derived keys (what every
// command runs with).
func LoadSettings[T any](spec Spec[T], src settings.Source) (T, error) {
	return settings.LoadDerived(spec.Name, spec.Defaults, spec.DerivedKeys(), src)
}

// archiveTables are the service's archived tables with the hot windows and
// retention schedule of the loaded settings applied.
func archiveTables[T any](spec Spec[T], cfg T) []archive.TableSpec {
	if spec.Archive == nil {
		return nil
	}
	tr := spec.Transport(cfg)
	tables := spec.Archive.Tables()
	for i, t := range tables {
		if v, ok := tr.Derived.Get(HotWindowKey(t.Table)); ok {
			tables[i].HotWindowDays = v
		}
		if v, ok := tr.Derived.Get(RetentionKey(t.Table)); ok {
			tables[i].RetentionDays = v
		}
	}
	return tables
}

// archiveTableNames are the names of the service's archived tables (the
// label values of their metrics).
func archiveTableNames[T any](spec Spec[T], cfg T) []string {
	var names []string
	for _, t := range archiveTables(spec, cfg) {
		names = append(names, t.Table)
	}
	return names
}

// retentionSchedule is archived table → days after an archive's newest
// record that it becomes purgeable (0: never), from the loaded settings.
func retentionSchedule[T any](spec Spec[T], cfg T) map[string]int {
	out := map[string]int{}
	for _, t := range archiveTables(spec, cfg) {
		out[t.Table] = t.RetentionDays
	}
	return out
}
