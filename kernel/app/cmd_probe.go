package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
)

// probeCmd is `<svc> probe [--strict]`.
type probeCmd[T any] struct{ strict bool }

func (c *probeCmd[T]) define(fs *flag.FlagSet) {
	fs.BoolVar(&c.strict, "strict", false, "exit 1 when a sweep plan scans a large table")
}

func (*probeCmd[T]) check() error { return nil }

func (c *probeCmd[T]) run(ctx context.Context, rt *runtime[T]) (int, error) {
	warned, err := rt.probe(ctx)
	if err == nil && warned && c.strict {
		return ExitFail, nil
	}
	return exitFor(err)
}

// probe checks the database and the plan of every sweep's selection. It
// returns warned=true when a sweep would sequentially scan a table larger
// than plan_check_seqscan_rows.
func (r *runtime[T]) probe(ctx context.Context) (warned bool, err error) {
	pool, err := r.pool(ctx)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	fmt.Fprintf(r.stdout, "database: reachable (%s)\n", settings.Redact(r.tr.DatabaseURL))
	warnings, err := checkPlans(ctx, pool, sweep.Policies(Groups(r.spec, r.cfg)), r.tr.PlanCheckSeqScanRows, r.logger)
	if err != nil {
		return false, err
	}
	if err := r.probeArchive(ctx, pool); err != nil {
		return false, err
	}
	for _, w := range warnings {
		fmt.Fprintf(r.stdout, "WARN %s\n", w)
	}
	if len(warnings) == 0 {
		fmt.Fprintln(r.stdout, "sweep plans: every selection avoids a sequential scan of a large table")
	}
	return len(warnings) > 0, nil
}

// checkPlans EXPLAINs every enabled policy's selection and returns (and logs
// at WARN) one line per sweep that would scan a table above maxRows.
func checkPlans(ctx context.Context, db prune.DB, policies []prune.Policy, maxRows int64, logger *slog.Logger) ([]string, error) {
	var warnings []string
	for _, p := range policies {
		if p.WindowDays == 0 {
			continue
		}
		pc, err := prune.ExplainSelection(ctx, db, p)
		if err != nil {
			return warnings, err
		}
		if pc.SeqScan && pc.TableRows > float64(maxRows) {
			msg := fmt.Sprintf("%s: the sweep's selection scans the whole table (~%.0f rows, above plan_check_seqscan_rows=%d); is its index missing?\n%s",
				p.Table, pc.TableRows, maxRows, strings.TrimRight(pc.Plan, "\n"))
			logger.WarnContext(ctx, "sweep plan scans a large table: is its index missing?",
				slog.String("table", p.Table), slog.Float64("estimated_rows", pc.TableRows),
				slog.Int64("plan_check_seqscan_rows", maxRows), slog.String("plan", pc.Plan))
			warnings = append(warnings, msg)
		}
	}
	return warnings, nil
}
