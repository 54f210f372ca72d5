// Package invariants holds the report-only retention watchdogs (ADR-058).
// Each swept table gets one from its prune.Policy, with no code
// of its own: it counts the rows that match the sweep's predicate and are
// older than the window plus OverrunGraceDays, i.e. rows the sweep should
// long have deleted. A violation means the sweep has stopped (lock stuck,
// index dropped, window misconfigured, cycles failing), not that data is at
// risk: watchdogs report, they never delete.
//
// They are drift tools for CI and operators (`<svc> invariants --gate`);
// production alerting reads the metrics (retention_invariant_violations,
// retention_oldest_eligible_age_seconds, ...).
package invariants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
)

// OverrunGraceDays is how far past its window a row must be before its
// watchdog fires: two days ride out a day of failed or skipped hourly cycles
// and any clock skew, so a firing watchdog means the sweep has really
// stopped. It yields the specified thresholds: outbox 30 + 2 = 32 d, inbox
// 31 + 2 = 33 d.
const OverrunGraceDays = 2

// FutureSkew is how far ahead of the database clock a row's age column may
// be before its future-dated watchdog counts it: writers' clocks drift by
// seconds, and a row an hour or more in the future was stamped by a wrong
// clock. The sweep keeps such a row until its date has passed (a row dated
// in 2126 is kept for a century), so it is reported.
const FutureSkew = time.Hour

// Spec is one watchdog.
type Spec struct {
	// Name identifies the invariant (outbox_retention_overrun, ...).
	Name string
	// Table is the watched table.
	Table string
	// WindowDays is the sweep's configured window.
	WindowDays int
	// ThresholdDays is WindowDays + OverrunGraceDays.
	ThresholdDays int
	// Description says in words what the invariant counts.
	Description string
	policy      prune.Policy
	// future makes the spec count rows dated beyond FutureSkew ahead of
	// the database clock instead of overrunning rows.
	future bool
	// count, when set, is the whole check: it counts the violations.
	count func(ctx context.Context, db prune.DB) (int64, error)
}

// ForUnparsedSubjects is an archived table's unparsed-subjects watchdog
// (<table>_subject_unparsed): rows whose declared subject field holds a
// digit but yields no subject (countSQL, archive.UnparsedSQL), which no
// fetch, hold, seal or order reaches. It reads every hot row of the table.
// Disabled, like the table's hot-window watchdog, while the archiver is
// off (enabled false).
func ForUnparsedSubjects(table, countSQL string, enabled bool) Spec {
	window := 0
	if enabled {
		window = 1
	}
	return Spec{Name: table + "_subject_unparsed", Table: table, WindowDays: window,
		Description: table + " rows whose declared subject field holds digits but yields no subject: no fetch, hold, seal or order reaches them",
		count: func(ctx context.Context, db prune.DB) (int64, error) {
			var n int64
			err := db.QueryRow(ctx, countSQL).Scan(&n)
			return n, archive.RedactRowValues(err) // the count runs the table's subject expression
		}}
}

// ForPolicy returns every watchdog of a swept table: its overrun invariant
// (FromPolicy) and its future-dated invariant (FutureFromPolicy).
func ForPolicy(p prune.Policy) []Spec {
	return []Spec{FromPolicy(p), FutureFromPolicy(p)}
}

// FutureFromPolicy derives a table's future-dated watchdog: rows matching the
// sweep's predicate whose age column is more than FutureSkew ahead of the
// database clock. Its name is the overrun invariant's with
// _retention_overrun replaced by _future_dated (outbox_future_dated, ...).
func FutureFromPolicy(p prune.Policy) Spec {
	name := strings.TrimSuffix(p.InvariantName(), "_retention_overrun") + "_future_dated"
	s := Spec{Name: name, Table: p.Table, WindowDays: p.WindowDays, policy: p, future: true}
	if s.Disabled() {
		s.Description = fmt.Sprintf("%s rows matching (%s) dated in the future: sweep disabled (window 0), not checked", p.Table, p.Eligible)
		return s
	}
	s.Description = fmt.Sprintf("%s rows matching (%s) with %s more than %v ahead of the database clock: the sweep keeps them until that date",
		p.Table, p.Eligible, p.AgeColumn, FutureSkew)
	return s
}

// Disabled is true when the table's sweep is off: nothing is expected to be
// deleted, so nothing can overrun.
func (s Spec) Disabled() bool { return s.WindowDays == 0 }

// FromPolicy derives a table's watchdog from its sweep policy.
func FromPolicy(p prune.Policy) Spec {
	s := Spec{Name: p.InvariantName(), Table: p.Table, WindowDays: p.WindowDays, policy: p}
	if s.Disabled() {
		s.Description = fmt.Sprintf("%s rows matching (%s): sweep disabled (window 0), not checked", p.Table, p.Eligible)
		return s
	}
	s.ThresholdDays = p.WindowDays + OverrunGraceDays
	s.Description = fmt.Sprintf("%s rows matching (%s) with %s older than %d days (window %d + grace %d)",
		p.Table, p.Eligible, p.AgeColumn, s.ThresholdDays, p.WindowDays, OverrunGraceDays)
	return s
}

// Result is one invariant's finding.
type Result struct {
	Name             string   `json:"name"`
	Table            string   `json:"table"`
	Violations       int64    `json:"violations"`
	OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
	ThresholdDays    int      `json:"threshold_days"`
	Disabled         bool     `json:"disabled,omitempty"`
	// FutureSkewSeconds is set on a future-dated invariant: it counts rows
	// dated more than this ahead of the database clock (ThresholdDays is
	// then 0, and OldestAgeSeconds negative: how far ahead the furthest is).
	FutureSkewSeconds float64 `json:"future_skew_seconds,omitempty"`
	// HeldThresholdSeconds is set on the vacuum watchdog: it counts the
	// holders of the database's xmin horizon held longer than this
	// (OldestAgeSeconds is then the longest hold).
	HeldThresholdSeconds float64 `json:"held_threshold_seconds,omitempty"`
	// WALThresholdBytes is set on the vacuum watchdog's slot invariant: it
	// counts the replication slots retaining more WAL than this.
	WALThresholdBytes int64  `json:"wal_threshold_bytes,omitempty"`
	Description       string `json:"description"`
}

// Check evaluates one invariant. It reads; it never deletes.
func Check(ctx context.Context, db prune.DB, s Spec) (Result, error) {
	r := Result{Name: s.Name, Table: s.Table, ThresholdDays: s.ThresholdDays, Disabled: s.Disabled(), Description: s.Description}
	if s.future {
		r.FutureSkewSeconds = FutureSkew.Seconds()
	}
	if s.Disabled() {
		return r, nil
	}
	if s.count != nil {
		n, err := s.count(ctx, db)
		if err != nil {
			return r, fmt.Errorf("invariant %s: %w", s.Name, err)
		}
		r.Violations = n
		return r, nil
	}
	var e prune.Eligibility
	var err error
	if s.future {
		e, err = prune.CountFutureDated(ctx, db, s.policy, FutureSkew)
	} else {
		e, err = prune.CountOlderThan(ctx, db, s.policy, s.ThresholdDays)
	}
	if err != nil {
		return r, fmt.Errorf("invariant %s: %w", s.Name, err)
	}
	r.Violations, r.OldestAgeSeconds = e.Count, e.OldestAgeSeconds()
	return r, nil
}

// CheckAll evaluates every spec in order; it stops at the first error.
func CheckAll(ctx context.Context, db prune.DB, specs []Spec) ([]Result, error) {
	out := make([]Result, 0, len(specs))
	for _, s := range specs {
		r, err := Check(ctx, db, s)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Violated reports whether any result has violations.
func Violated(rs []Result) bool {
	for _, r := range rs {
		if r.Violations > 0 {
			return true
		}
	}
	return false
}

// ArchiveOverrunGraceDays is the one grace of the archived tables'
// watchdogs: a week past the hot window, an hourly archiver has
// had 168 passes to move a row.
const ArchiveOverrunGraceDays = 7

// errWatchOnly is what a watchdog's policy answers if anything ever asked
// it to delete: it only counts.
var errWatchOnly = errors.New("invariants: an archive watchdog never deletes")

// ForArchive is the watchdog of an archived table: rows older than the hot
// window + ArchiveOverrunGraceDays, which the archiver should have moved.
// hotWindowDays 0 (the archiver is disabled) disables it.
func ForArchive(table, ageColumn string, hotWindowDays int) Spec {
	p := prune.Policy{
		Declaration: prune.Declaration{
			Table:       table,
			AgeColumn:   ageColumn,
			Eligible:    "TRUE",
			DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) { return 0, errWatchOnly },
		},
		Bounds: prune.Bounds{
			WindowDays: hotWindowDays,
		},
	}
	s := Spec{Name: table + "_hot_window_overrun", Table: table, WindowDays: hotWindowDays, policy: p}
	if s.Disabled() {
		s.Description = fmt.Sprintf("%s rows past the hot window: archiver disabled, not checked", table)
		return s
	}
	s.ThresholdDays = hotWindowDays + ArchiveOverrunGraceDays
	s.Description = fmt.Sprintf("%s rows with %s older than %d days (hot window %d + grace %d): the archiver should have archived them",
		table, ageColumn, s.ThresholdDays, hotWindowDays, ArchiveOverrunGraceDays)
	return s
}
