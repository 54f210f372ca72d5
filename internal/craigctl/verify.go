package craigctl

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
)

// verifyReport is the answer of POST /admin/archive/verify.
type verifyReport struct {
	Deep     bool `json:"deep"`
	Checked  int  `json:"checked"`
	Failed   int  `json:"failed"`
	Failures []struct {
		ArchiveID string `json:"archive_id"`
		Kind      string `json:"kind"`
		Detail    string `json:"detail"`
	} `json:"failures"`
	ColumnDrift []string `json:"column_drift"`
	Orphans     []string `json:"orphans"`
	OrphanCount int      `json:"orphan_count"`
}

func newVerifyCmd(o *options) *cobra.Command {
	var deep bool
	var limit int
	lf := &decimal{v: &limit}
	c := &cobra.Command{
		Use: "verify [--deep] [--limit N]", Short: "Check every archive against its ledger row (deep: its contents too); exit 1 on a failure",
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := map[string]any{"deep": deep}
			if lf.set {
				if limit < 1 {
					return usageErr("--limit %d: at least 1 archive", limit)
				}
				body["limit"] = limit
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			sp := o.spinner("verifying", "archives")
			var rep verifyReport
			raw, err := cl.do(cmd.Context(), http.MethodPost, "/admin/archive/verify", nil, body, &rep)
			sp.done()
			if err != nil {
				return err
			}
			if err := o.show(raw, func(w io.Writer) { verifyHuman(w, rep) }); err != nil {
				return err
			}
			if rep.Failed > 0 {
				return &ExitError{Code: ExitFailed, Err: fmt.Errorf("%d of %d archive(s) failed verification", rep.Failed, rep.Checked)}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&deep, "deep", false, "also read every object: its sha256, line count and every line's id")
	c.Flags().Var(lf, "limit", "check at most N archives (oldest first)")
	return c
}

func verifyHuman(w io.Writer, rep verifyReport) {
	mode := "shallow"
	if rep.Deep {
		mode = "deep"
	}
	row(w, fmt.Sprintf("%s verify: %d archive(s) checked, %d failed, %d orphan object(s)", mode, rep.Checked, rep.Failed, rep.OrphanCount))
	if len(rep.Failures) > 0 {
		row(w, "ARCHIVE_ID", "KIND", "DETAIL")
		for _, f := range rep.Failures {
			row(w, f.ArchiveID, f.Kind, f.Detail)
		}
	}
	if len(rep.ColumnDrift) > 0 {
		row(w, "column drift (reported, not a failure): "+strings.Join(rep.ColumnDrift, "; "))
	}
	for _, k := range rep.Orphans {
		row(w, "orphan: "+k)
	}
}

// gcReport is the answer of POST /admin/archive/gc.
type gcReport struct {
	DryRun  bool     `json:"dry_run"`
	Orphans []string `json:"orphans"`
	Deleted []string `json:"deleted"`
}

func newGCCmd(o *options) *cobra.Command {
	var days int
	var dryRun, yes bool
	df := &decimal{v: &days}
	c := &cobra.Command{
		Use:   "gc --older-than DAYS [--dry-run] [--yes]",
		Short: "Delete objects under the service's prefix that no ledger row names, older than DAYS (asks to type yes)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !df.set || days < 1 {
				return usageErr("--older-than DAYS (at least 1) is required")
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			var plan gcReport
			raw, err := cl.do(cmd.Context(), http.MethodPost, "/admin/archive/gc", nil, map[string]any{"older_than_days": days, "dry_run": true}, &plan)
			if err != nil || dryRun || len(plan.Orphans) == 0 {
				return o.gcShow(raw, plan, err)
			}
			if err := o.confirm(cmd.Context(), yes, fmt.Sprintf("This deletes %d orphan object(s) of %s older than %d day(s), every version:\n  %s",
				len(plan.Orphans), cl.service, days, strings.Join(plan.Orphans, "\n  "))); err != nil {
				return err
			}
			var res gcReport
			// Exactly the objects shown: one that stopped being an orphan, or
			// one that aged past the bound since, is not collected.
			raw, err = cl.do(cmd.Context(), http.MethodPost, "/admin/archive/gc", nil, map[string]any{"older_than_days": days, "keys": plan.Orphans}, &res)
			return o.gcShow(raw, res, err)
		},
	}
	c.Flags().Var(df, "older-than", "only objects last modified more than DAYS days ago (at least 1)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "list the orphans; delete nothing")
	c.Flags().BoolVar(&yes, "yes", false, "do not ask (required when stdin is not a terminal)")
	return c
}

func (o *options) gcShow(raw []byte, rep gcReport, err error) error {
	if err != nil {
		return err
	}
	return o.show(raw, func(w io.Writer) {
		switch {
		case rep.DryRun && len(rep.Orphans) == 0:
			row(w, "no orphan objects older than the bound")
		case rep.DryRun:
			row(w, "WOULD DELETE")
			for _, k := range rep.Orphans {
				row(w, k)
			}
		default:
			row(w, fmt.Sprintf("DELETED (%d)", len(rep.Deleted)))
			for _, k := range rep.Deleted {
				row(w, k)
			}
		}
	})
}
