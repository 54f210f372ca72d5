package app

import (
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
)

// WindowKeyOf is the settings key of a swept policy's window: the outbox's
// dead letters have their own (outbox.dead_letter_retention_days), every
// other policy its table's WindowKey.
func WindowKeyOf(p prune.Policy) string {
	if p.Label() == sweep.OutboxDeadLetters {
		return settings.OutboxDeadLetterRetentionKey
	}
	return WindowKey(p.Table)
}

// TableInfo is one table a service's sweeps or archiver reach, as its
// registration and its default settings declare it: docs/tables.md is
// generated from it (cmd/tablesdoc), so no document lists tables by hand.
type TableInfo struct {
	// Table is the table, or a swept table's second policy's label
	// (event_outbox_dead_letters).
	Table string
	// Key is a swept table's window settings key.
	Key string
	// Archived: archived, then deleted (else swept: hard deleted).
	Archived  bool
	AgeColumn string
	// Eligible and Keep are a swept table's rules (SQL over its row).
	Eligible, Keep string
	// Invariant is a swept table's watchdog.
	Invariant string
	// Days is the default window (swept) or hot window (archived).
	Days int
	// RetentionDays is an archived table's default retention after its
	// newest record (0: none, never purgeable).
	RetentionDays int
	// Subjects are what an archived table's rows are about: each a kind
	// and the SQL that computes it from the row ("case: <expression>").
	Subjects []string
	// Transport: a kernel table every service has (the outbox, the inbox).
	Transport bool
}

// Tables are every table the service sweeps or archives, with its default
// settings: the transport tables, the service's own swept tables, then its
// archived tables.
func (s Spec[T]) Tables() []TableInfo {
	var out []TableInfo
	for _, g := range Groups(s, s.Defaults) {
		for _, p := range g.Policies {
			out = append(out, TableInfo{Table: p.Label(), Key: WindowKeyOf(p), AgeColumn: p.AgeColumn, Eligible: p.Eligible, Keep: p.Keep, Invariant: p.Invariant,
				Days: p.WindowDays, Transport: g.Name == sweep.TransportGroupName})
		}
	}
	if s.Archive == nil {
		return out
	}
	hot := s.Archive.Settings(s.Defaults).HotWindowDays
	for _, t := range archiveTables(s, s.Defaults) {
		info := TableInfo{Table: t.Table, Archived: true, AgeColumn: t.AgeColumn, Days: t.HotWindowDays, RetentionDays: t.RetentionDays}
		if info.Days == 0 {
			info.Days = hot
		}
		for _, sub := range t.Subjects {
			info.Subjects = append(info.Subjects, string(sub.Kind)+": "+sub.SQL)
		}
		out = append(out, info)
	}
	return out
}
