package craigctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// dueListing is a service's answer of GET /admin/dispositions/due.
type dueListing struct {
	Version   string `json:"version"`
	AsOf      string `json:"as_of"`
	Unindexed int64  `json:"unindexed_archives"`
	Items     []struct {
		Item      string `json:"item"`
		Series    string `json:"series"`
		Authority string `json:"authority"`
		Action    string `json:"action"`
		Rows      int64  `json:"rows"`
		Cases     []struct {
			Subject      string   `json:"subject"`
			Due          string   `json:"due"`
			RowsHot      int64    `json:"rows_hot"`
			RowsArchived int64    `json:"rows_archived"`
			Archives     []string `json:"archives"`
			Holds        []string `json:"holds"`
		} `json:"cases"`
	} `json:"items"`
}

func newDispositionCmd(o *options) *cobra.Command {
	var fleet string
	return group("disposition", "Disposition review: what the records schedule makes due (ADR-073)", newDispositionDue(o, &fleet),
		newDispositionFreeze(o), newDispositionShow(o), newDispositionApprove(o), newDispositionReject(o))
}

// batchPath is a batch's path on its service; the id must be a UUID.
func batchPath(id string, tail string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || u.String() != strings.ToLower(id) {
		return "", usageErr("%q is not a batch id (a UUID)", id)
	}
	return "/admin/dispositions/" + u.String() + tail, nil
}

func newDispositionShow(o *options) *cobra.Command {
	var cert bool
	c := &cobra.Command{
		Use:   "show ID --service SVC [--certificate]",
		Short: "Show a disposition batch, or with --certificate its proof of disposition",
		Long: `Show batch ID of --service as JSON: its status, schedule version, items and
cases (by subject for the reviewers until it is executed, then by keyed hash
only). With --certificate, print the executed batch's certificate as the
store holds it: the items with their authority, the counts per item and
table, the archives rewritten and purged with their lineage, who proposed and
approved and when, and the cases by keyed hash. A batch not executed has no
certificate (404, exit 1). Needs records:review.`,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tail := ""
			if cert {
				tail = "/certificate"
			}
			path, err := batchPath(args[0], tail)
			if err != nil {
				return err
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if _, err := cl.do(cmd.Context(), http.MethodGet, path, nil, nil, &raw); err != nil {
				return fmt.Errorf("%s: %w", cl.service, err)
			}
			var out bytes.Buffer
			if err := json.Indent(&out, raw, "", "  "); err != nil {
				return err
			}
			_, err = fmt.Fprintln(o.io.Out, out.String())
			return err
		},
	}
	c.Flags().BoolVar(&cert, "certificate", false, "print the executed batch's certificate")
	return c
}

func newDispositionApprove(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "approve ID --service SVC",
		Short: "Approve a proposed batch: its due rows are destroyed (another identity than its proposer)",
		Long: `Approve batch ID of --service: the service computes again what is due, destroys
the batch's cases that still are (hot rows, and every archive holding one of
their rows rewritten once; an archive whose every row is due purged whole),
skips and reports the others, and writes the certificate. The proposer
cannot approve (403, exit 5). A call that fails part way is finished by
running it again; an executed batch answers its outcome again. Prints its
outcome as JSON. Needs records:review.`,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := batchPath(args[0], "/approve")
			if err != nil {
				return err
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			return o.postEach(cmd.Context(), []*client{cl}, func(int) string { return path }, func(int) any { return struct{}{} })
		},
	}
}

func newDispositionDue(o *options, fleet *string) *cobra.Command {
	var asOf string
	c := &cobra.Command{
		Use:   "due (--service SVC | --fleet fleet.yaml) [--as-of YYYY-MM-DD]",
		Short: "List what the schedule in force makes due, case by case, with the item's authority and the holds that keep it",
		Long: `List, on each service, what the records schedule in force makes due on a UTC
day (today, or --as-of for a preview): per item, each case (case:<n>; "-" for
rows about no case) with its due date, hot and archived rows, and the holds
that keep it. The services index their archives by case first (a listing
that says "unindexed" left some for the next call). Needs records:review.
A service with no schedule in force answers 409 (exit 1).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asOf != "" {
				if _, err := time.Parse(time.DateOnly, asOf); err != nil {
					return usageErr("--as-of %q is not a date (YYYY-MM-DD)", asOf)
				}
			}
			cls, _, err := o.scheduleTargets(cmd.Context(), *fleet)
			if err != nil {
				return err
			}
			var q url.Values
			if asOf != "" {
				q = url.Values{"as_of": {asOf}}
			}
			lists := make([]dueListing, len(cls))
			for i, cl := range cls {
				if _, err := cl.do(cmd.Context(), http.MethodGet, "/admin/dispositions/due", q, nil, &lists[i]); err != nil {
					return fmt.Errorf("%s: %w", cl.service, err)
				}
			}
			return o.printDue(cls, lists)
		},
	}
	c.Flags().StringVar(fleet, "fleet", "", "every archiving service of this fleet file")
	c.Flags().StringVar(&asOf, "as-of", "", "list what is due on this UTC day instead of today (YYYY-MM-DD)")
	return c
}

// printDue prints each service's due listing: one JSON line per service
// with --json, else a table of the cases.
func (o *options) printDue(cls []*client, lists []dueListing) error {
	if o.json {
		for i, cl := range cls {
			if err := json.NewEncoder(o.io.Out).Encode(map[string]any{"service": cl.service, "due": lists[i]}); err != nil {
				return err
			}
		}
		return nil
	}
	return o.show(nil, func(w io.Writer) {
		row(w, "SERVICE", "ITEM", "SERIES", "CASE", "DUE", "HOT", "ARCHIVED", "HOLDS", "AUTHORITY")
		for i, cl := range cls {
			for _, it := range lists[i].Items {
				for _, c := range it.Cases {
					subj := c.Subject
					if subj == "" {
						subj = "-"
					}
					row(w, cl.service, it.Item, it.Series, subj, c.Due, c.RowsHot, c.RowsArchived, len(c.Holds), it.Authority)
				}
			}
			if lists[i].Unindexed > 0 {
				row(w, cl.service, "-", "-", "-", "-", "-", "-", "-", fmt.Sprintf("%d archives not indexed yet: run again", lists[i].Unindexed))
			}
		}
	})
}

func newDispositionFreeze(o *options) *cobra.Command {
	var limit int64
	c := &cobra.Command{
		Use:   "freeze --service SVC [--limit ROWS]",
		Short: "Freeze a batch of what is due today (the cases no hold keeps) for a second identity's review",
		Long: `Freeze, on --service, a batch of what the records schedule in force makes due
today: the due cases in the listing's order that no hold keeps and no open
batch holds, while they fit in --limit rows (hot and archived; the service's
default when absent). Prints the batch as JSON: its id, its cases by subject
for the reviewers, and "held" (the due cases a hold kept out). Nothing is
destroyed until another identity approves it (craigctl disposition approve).
Nothing due answers 409 (exit 1). Needs records:review.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := map[string]any{}
			if cmd.Flags().Changed("limit") {
				if limit <= 0 {
					return usageErr("--limit %d: a positive number of rows", limit)
				}
				body["limit"] = limit
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			return o.postEach(cmd.Context(), []*client{cl}, func(int) string { return "/admin/dispositions" }, func(int) any { return body })
		},
	}
	c.Flags().Int64Var(&limit, "limit", 0, "the most rows (hot and archived) the batch takes")
	return c
}

func newDispositionReject(o *options) *cobra.Command {
	var reason, until string
	c := &cobra.Command{
		Use:   "reject ID --service SVC --reason R [--extend-until YYYY-MM-DD]",
		Short: "Return a proposed batch to the schedule; with --extend-until keep its cases until that day (a hearing, an audit)",
		Long: `Reject batch ID of --service with a reason: its cases return to the
schedule (due again at once). With --extend-until (a day after today, within
a hundred years) each of its cases is kept off the due listing until that day,
recorded with who and why: an extension for a fair hearing or an audit.
Needs records:review.`,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := batchPath(args[0], "/reject")
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return usageErr("--reason is required")
			}
			body := map[string]any{"reason": reason}
			if until != "" {
				if _, err := time.Parse(time.DateOnly, until); err != nil {
					return usageErr("--extend-until %q is not a date (YYYY-MM-DD)", until)
				}
				body["extend_until"] = until
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			return o.postEach(cmd.Context(), []*client{cl}, func(int) string { return path }, func(int) any { return body })
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the batch is not approved (required)")
	c.Flags().StringVar(&until, "extend-until", "", "keep the batch's cases until this UTC day (YYYY-MM-DD)")
	return c
}
