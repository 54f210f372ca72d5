// Package invariants holds the report-only retention watchdogs (seed 001,
// A4 and D19). Each swept table gets one from its prune.Policy, with no code
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
	"fmt"

	"github.com/craig/retention/kernel/prune"
)

// OverrunGraceDays is how far past its window a row must be before its
// watchdog fires: two days ride out a day of failed or skipped hourly cycles
// and any clock skew, so a firing watchdog means the sweep has really
// stopped. It yields the seed's thresholds: outbox 30 + 2 = 32 d, inbox
// 31 + 2 = 33 d.
const OverrunGraceDays = 2

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
	Description      string   `json:"description"`
}

// Check evaluates one invariant. It reads; it never deletes.
func Check(ctx context.Context, db prune.DB, s Spec) (Result, error) {
	r := Result{Name: s.Name, Table: s.Table, ThresholdDays: s.ThresholdDays, Disabled: s.Disabled(), Description: s.Description}
	if s.Disabled() {
		return r, nil
	}
	e, err := prune.CountOlderThan(ctx, db, s.policy, s.ThresholdDays)
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
