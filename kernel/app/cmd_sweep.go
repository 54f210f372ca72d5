package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/kernel/vacuumwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// sweepCmd is `<svc> sweep --once [--dry-run] [--json]`.
type sweepCmd[T any] struct{ once, dryRun, asJSON bool }

func (c *sweepCmd[T]) define(fs *flag.FlagSet) {
	fs.BoolVar(&c.once, "once", false, "run one sweep cycle now (required)")
	fs.BoolVar(&c.dryRun, "dry-run", false, "delete nothing; report what a cycle would delete")
	fs.BoolVar(&c.asJSON, "json", false, "print the report as one JSON object")
}

func (c *sweepCmd[T]) check() error {
	if !c.once {
		return errors.New("--once is required (the scheduled sweep runs inside serve)")
	}
	return nil
}

func (c *sweepCmd[T]) run(ctx context.Context, rt *runtime[T]) (int, error) {
	return exitFor(rt.sweepOnce(ctx, c.dryRun, c.asJSON))
}

func (r *runtime[T]) sweepOnce(ctx context.Context, dryRun, asJSON bool) error {
	pool, err := r.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := r.sweeper(pool, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	run := s.RunOnce
	if dryRun {
		run = s.DryRun
	}
	rep, runErr := run(ctx)
	var vac *vacuumReport
	if runErr == nil { // a failed cycle says why; the database may not even answer
		v := r.vacuumAfterSweep(ctx, pool)
		vac = &v
	}
	if asJSON {
		enc := json.NewEncoder(r.stdout)
		if err := enc.Encode(sweepOnceReport{Report: rep, Vacuum: vac}); err != nil {
			return errors.Join(runErr, fmt.Errorf("write report: %w", err))
		}
	} else if err := writeTable(r.stdout, rep); err != nil {
		return errors.Join(runErr, fmt.Errorf("write report: %w", err))
	} else if vac != nil {
		writeVacuum(r.stdout, *vac)
	}
	return runErr
}

// sweepOnceReport is `sweep --once --json`: the cycle's report and what
// the vacuum watchdog read after it.
type sweepOnceReport struct {
	sweep.Report
	// Vacuum is absent when the cycle failed.
	Vacuum *vacuumReport `json:"vacuum,omitempty"`
}

// vacuumReport says whether VACUUM can reclaim what the sweep deleted: no
// findings means it can.
type vacuumReport struct {
	// Findings are what is over the vacuum_* limits (empty: nothing).
	Findings []vacuumwatch.Finding `json:"findings"`
	// DeadTuples of each swept table after the cycle.
	DeadTuples map[string]int64 `json:"dead_tuples"`
	// Unchecked are the vacuum_* settings at 0: what they bound was not
	// checked.
	Unchecked []string `json:"unchecked,omitempty"`
	// Error is why the watchdog could not read the database (the cycle's
	// own outcome does not depend on it).
	Error string `json:"error,omitempty"`
}

// vacuumAfterSweep reads the vacuum watchdog over the swept tables.
func (r *runtime[T]) vacuumAfterSweep(ctx context.Context, pool *pgxpool.Pool) vacuumReport {
	rep, err := vacuumwatch.Read(ctx, pool, sweptTables(sweep.Policies(Groups(r.spec, r.cfg))))
	if err != nil {
		return vacuumReport{Findings: []vacuumwatch.Finding{}, DeadTuples: map[string]int64{}, Error: err.Error()}
	}
	limits := VacuumLimits(r.spec.Transport(r.cfg))
	findings := vacuumwatch.Findings(rep, limits)
	if findings == nil {
		findings = []vacuumwatch.Finding{}
	}
	var unchecked []string
	for key, off := range map[string]bool{"vacuum_horizon_max_held": limits.MaxHeld == 0,
		"vacuum_slot_max_retained_wal_bytes": limits.MaxSlotWALBytes == 0, "vacuum_dead_tuples_max": limits.MaxDeadTuples == 0} {
		if off {
			unchecked = append(unchecked, key)
		}
	}
	slices.Sort(unchecked)
	return vacuumReport{Findings: findings, DeadTuples: rep.DeadTuples, Unchecked: unchecked}
}

// writeVacuum is the vacuum part of the text report: one line when VACUUM
// can reclaim what the sweep deleted, else one line per finding.
func writeVacuum(w io.Writer, v vacuumReport) {
	switch {
	case v.Error != "":
		fmt.Fprintf(w, "vacuum: could not read the database: %s\n", v.Error)
	case len(v.Unchecked) == 3:
		fmt.Fprintf(w, "vacuum: not checked (%s are 0)\n", strings.Join(v.Unchecked, ", "))
	case len(v.Findings) == 0:
		fmt.Fprintln(w, "vacuum: nothing holds VACUUM back (no holder, slot or dead-tuple count over its limit)"+uncheckedNote(v.Unchecked))
	default:
		for _, f := range v.Findings {
			fmt.Fprintf(w, "VACUUM cannot keep up: %s\n", f)
		}
		if len(v.Unchecked) > 0 {
			fmt.Fprintln(w, "vacuum:"+uncheckedNote(v.Unchecked))
		}
	}
}

// uncheckedNote names the vacuum_* settings at 0, for the text report.
func uncheckedNote(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return "; not checked: " + strings.Join(keys, ", ") + " (0)"
}

func writeTable(w io.Writer, rep sweep.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if rep.DryRun {
		fmt.Fprintf(tw, "dry run: nothing deleted; leases free now: %v\n", rep.LockAcquired)
		fmt.Fprintln(tw, "TABLE\tGROUP\tELIGIBLE\tOLDEST ELIGIBLE\tBATCHES\tWOULD CAP\tSKIPPED\tNOTES")
		for _, t := range rep.Tables {
			eligible, oldest := "-", "-"
			if t.DryRunTable != nil {
				eligible = fmt.Sprint(t.Eligible)
				oldest = age(t.OldestEligibleAgeSeconds)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%s\t%s\n", t.Table, t.Group, eligible, oldest, t.Batches, t.Capped, dash(t.Skipped), notes(t))
		}
		return tw.Flush()
	}
	fmt.Fprintf(tw, "lock acquired: %v\n", rep.LockAcquired)
	fmt.Fprintln(tw, "TABLE\tGROUP\tDELETED\tBATCHES\tCAPPED\tMS\tSKIPPED\tERROR\tNOTES")
	for _, t := range rep.Tables {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%v\t%.1f\t%s\t%s\t%s\n", t.Table, t.Group, t.Deleted, t.Batches, t.Capped, t.DurationMS, dash(t.Skipped), dash(t.Error), notes(t))
	}
	return tw.Flush()
}

// notes is what the JSON report says beyond the columns, in words: the
// partitions dropped, kept, busy or not considered (and the dry run's
// would-be ones), the pause per reason and a pause budget that ran out.
func notes(t sweep.TableReport) string {
	var n []string
	list := func(what string, names []string) {
		if len(names) > 0 {
			n = append(n, fmt.Sprintf("%s %d partition(s): %s", what, len(names), strings.Join(names, ",")))
		}
	}
	list("dropped", t.PartitionsDropped)
	list("kept (rows that must stay)", t.PartitionsKept)
	list("busy (next cycle)", t.PartitionBusy)
	if t.DryRunTable != nil {
		list("would drop", t.PartitionsToDrop)
		list("would keep", t.PartitionsToKeep)
	}
	if t.PartitionsNotRetired != "" {
		n = append(n, "partitions not retired: "+t.PartitionsNotRetired)
	}
	for _, reason := range slices.Sorted(maps.Keys(t.PausedSeconds)) {
		n = append(n, fmt.Sprintf("paused %.1fs (%s)", t.PausedSeconds[reason], reason))
	}
	if t.PauseExhausted != "" {
		n = append(n, "pause budget exhausted ("+t.PauseExhausted+"): the rest waits for the next cycle")
	}
	if len(n) == 0 {
		return "-"
	}
	return strings.Join(n, "; ")
}

// age renders an age in seconds as days and hours, or "-" for none; a
// negative age (a row dated in the future) gets a minus sign. It computes in
// float seconds: an age beyond time.Duration's ±292 years (a BC or
// -infinity row) must not wrap around.
func age(secs *float64) string {
	if secs == nil {
		return "-"
	}
	s, sign := *secs, ""
	if s < 0 {
		s, sign = -s, "-"
	}
	return fmt.Sprintf("%s%.0fd%02.0fh", sign, math.Floor(s/86400), math.Floor(math.Mod(s, 86400)/3600))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
