package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/vacuumwatch"
)

// invariantsCmd is `<svc> invariants [--gate] [--json]`: exit 0 checked,
// 1 violated with --gate, 2 when the check could not run.
type invariantsCmd[T any] struct{ gate, asJSON bool }

func (c *invariantsCmd[T]) define(fs *flag.FlagSet) {
	fs.BoolVar(&c.gate, "gate", false, "exit 1 when any invariant is violated")
	fs.BoolVar(&c.asJSON, "json", false, "print the results as one JSON object")
}

func (*invariantsCmd[T]) check() error { return nil }

func (c *invariantsCmd[T]) run(ctx context.Context, rt *runtime[T]) (int, error) {
	violated, err := rt.invariants(ctx, c.asJSON)
	switch {
	case err != nil:
		return ExitUsage, fmt.Errorf("invariants failed: %w", err) // the gate's contract: 2 on error
	case violated && c.gate:
		return ExitFail, nil
	}
	return ExitOK, nil
}

// invariantsReport is the JSON form of `invariants --json`.
type invariantsReport struct {
	Invariants []invariants.Result `json:"invariants"`
}

func (r *runtime[T]) invariants(ctx context.Context, asJSON bool) (violated bool, err error) {
	pool, err := r.pool(ctx)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	results, err := invariants.CheckAll(ctx, pool, InvariantSpecs(r.spec, r.cfg))
	if err != nil {
		return false, err
	}
	vac, err := vacuumwatch.Read(ctx, pool, nil)
	if err != nil {
		return false, err
	}
	results = append(results, vacuumwatch.Invariants(vac, VacuumLimits(r.spec.Transport(r.cfg)))...)
	if asJSON {
		if err := json.NewEncoder(r.stdout).Encode(invariantsReport{Invariants: results}); err != nil {
			return false, fmt.Errorf("write report: %w", err)
		}
		return invariants.Violated(results), nil
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT\tTABLE\tVIOLATIONS\tOLDEST OFFENDING\tTHRESHOLD")
	for _, res := range results {
		threshold := fmt.Sprintf("%dd", res.ThresholdDays)
		if res.FutureSkewSeconds > 0 {
			threshold = "now+" + (time.Duration(res.FutureSkewSeconds) * time.Second).String()
		}
		if res.HeldThresholdSeconds > 0 {
			threshold = "held>" + time.Duration(res.HeldThresholdSeconds*float64(time.Second)).String()
		}
		if res.WALThresholdBytes > 0 {
			threshold = fmt.Sprintf("wal>%dB", res.WALThresholdBytes)
		}
		if res.Disabled {
			threshold = "disabled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", res.Name, res.Table, res.Violations, age(res.OldestAgeSeconds), threshold)
	}
	if err := tw.Flush(); err != nil {
		return false, fmt.Errorf("write report: %w", err)
	}
	return invariants.Violated(results), nil
}
