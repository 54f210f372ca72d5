package craigctl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// newArchiveCmd is `craigctl archive …`.
func newArchiveCmd(o *options) *cobra.Command {
	return group("archive", "A service's archives: run, purge, holds, retention, records, fetch, verify, gc",
		newRunCmd(o), newPurgeCmd(o), group("purges", "Purge requests awaiting approval", newApproveCmd(o)),
		group("hold", "Legal holds", newHoldCreateCmd(o), newHoldReleaseCmd(o), newHoldListCmd(o)),
		group("retention", "Retention dates", newRetentionSetCmd(o)),
		group("records", "The archive ledger", newRecordsListCmd(o)),
		newFetchCmd(o), newVerifyCmd(o), newGCCmd(o))
}

// passReport is the answer of POST /admin/archive/run.
type passReport struct {
	More   bool `json:"more"`
	Tables []struct {
		Table       string    `json:"table"`
		Archived    int64     `json:"archived"`
		Quarantined int       `json:"quarantined"`
		Archives    []archRef `json:"archives"`
		Error       *string   `json:"error"`
	} `json:"tables"`
}

type archRef struct {
	ArchiveID string `json:"archive_id"`
}

func newRunCmd(o *options) *cobra.Command {
	var budget int
	bf := &decimal{v: &budget}
	c := &cobra.Command{
		Use: "run", Short: "Run one archive pass now, attributed to the token's subject", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.target()
			if err != nil {
				return err
			}
			body := map[string]any{}
			if bf.set {
				if budget < 1 {
					return usageErr("--budget %d: at least 1 batch", budget)
				}
				body["budget"] = budget
			}
			var rep passReport
			raw, err := cl.do(cmd.Context(), http.MethodPost, "/admin/archive/run", nil, body, &rep)
			if err != nil {
				return err
			}
			return o.show(raw, func(w io.Writer) {
				row(w, "TABLE", "ARCHIVED", "QUARANTINED", "ARCHIVES", "ERROR")
				for _, t := range rep.Tables {
					row(w, t.Table, t.Archived, t.Quarantined, len(t.Archives), orDash(t.Error))
				}
				if rep.More {
					row(w, "(more rows are due: run again or let the scheduled archiver go on)")
				}
			})
		},
	}
	c.Flags().Var(bf, "budget", "the most batches this pass archives (the service bounds it; default its own)")
	return c
}

// purgeAnswer is the answer of POST /admin/archive/purge and of an approval.
type purgeAnswer struct {
	Candidates  []string `json:"candidates"`
	Purged      []string `json:"purged"`
	Skipped     []string `json:"skipped"`
	More        bool     `json:"more"`
	PurgeID     string   `json:"purge_id"`
	Status      string   `json:"status"`
	Certificate string   `json:"certificate"`
}

func newPurgeCmd(o *options) *cobra.Command {
	var limit int
	var dryRun, yes bool
	lf := &decimal{v: &limit}
	c := &cobra.Command{
		Use:   "purge --limit N [--dry-run] [--yes]",
		Short: "Destroy up to N archives past their retention date and not held (asks to type yes)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !lf.set || limit < 1 {
				return usageErr("--limit N (at least 1) is required: a purge is always bounded")
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			var plan purgeAnswer
			raw, err := cl.do(cmd.Context(), http.MethodPost, "/admin/archive/purge", nil, map[string]any{"limit": limit, "dry_run": true}, &plan)
			if err != nil || len(plan.Candidates) == 0 {
				return o.purgePlan(raw, plan, "", err)
			}
			detail, err := describeArchives(cmd.Context(), cl, plan.Candidates)
			if err != nil || dryRun {
				return o.purgePlan(raw, plan, detail, err)
			}
			if err := o.confirm(cmd.Context(), yes, fmt.Sprintf("This destroys exactly these %d archive(s) of %s, every version of their objects (under dual control it requests that, and another operator's approval destroys them):\n%s",
				len(plan.Candidates), cl.service, detail)); err != nil {
				return err
			}
			sp := o.spinner("purging", "archives")
			var res purgeAnswer
			// Exactly the confirmed archives: the service destroys nothing
			// (409 no_longer_purgeable) if any of them is no longer due.
			raw, err = cl.do(cmd.Context(), http.MethodPost, "/admin/archive/purge", nil, map[string]any{"archive_ids": plan.Candidates}, &res)
			sp.done()
			if err != nil {
				return err
			}
			return o.show(raw, func(w io.Writer) { purgeResult(w, cl.service, res) })
		},
	}
	c.Flags().Var(lf, "limit", "the most archives to purge (required; the service bounds it)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be purged; destroy nothing")
	c.Flags().BoolVar(&yes, "yes", false, "do not ask (required when stdin is not a terminal)")
	return c
}

// describeArchives renders what a destructive prompt destroys: each
// archive's table, records, record-time range, retention date and holds
// (from the ledger listing), so the operator confirms records, not ids.
func describeArchives(ctx context.Context, cl *client, ids []string) (string, error) {
	var ans struct {
		Records []record `json:"records"`
	}
	byID := map[string]record{}
	q := url.Values{"limit": {"1000"}}
	for {
		if _, err := cl.do(ctx, http.MethodGet, "/admin/archive/records", q, nil, &ans); err != nil {
			return "", err
		}
		for _, r := range ans.Records {
			byID[r.ArchiveID] = r
		}
		if len(ans.Records) < 1000 || len(byID) >= len(ids) && allKnown(byID, ids) {
			break
		}
		q.Set("after", ans.Records[len(ans.Records)-1].ArchiveID)
		ans.Records = nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %-36s  %-20s  %8s  %-20s  %-20s  %-10s  %s\n", "ARCHIVE_ID", "TABLE", "RECORDS", "FIRST_RECORD_AT", "LAST_RECORD_AT", "RETAIN", "HOLDS")
	for _, id := range ids {
		r, ok := byID[id]
		if !ok {
			fmt.Fprintf(&b, "  %-36s  (not in the ledger listing)\n", id)
			continue
		}
		fmt.Fprintf(&b, "  %-36s  %-20s  %8d  %-20s  %-20s  %-10s  %d\n", id, sanitize(r.Table), r.RecordCount,
			r.FirstRecordAt.UTC().Format(time.RFC3339), r.LastRecordAt.UTC().Format(time.RFC3339), orDash(r.RetentionUntil), len(r.Holds))
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

func allKnown(byID map[string]record, ids []string) bool {
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			return false
		}
	}
	return true
}

// purgePlan prints a dry run's candidates (or the error that stopped it).
func (o *options) purgePlan(raw []byte, plan purgeAnswer, detail string, err error) error {
	if err != nil {
		return err
	}
	return o.show(raw, func(w io.Writer) {
		if len(plan.Candidates) == 0 {
			row(w, "nothing to purge: no archive is past its retention date and free of holds")
			return
		}
		row(w, "WOULD PURGE")
		_, _ = fmt.Fprintln(w, detail) // already escaped and aligned
		if plan.More {
			row(w, "(more are purgeable beyond --limit)")
		}
	})
}

func purgeResult(w io.Writer, service string, res purgeAnswer) {
	if res.Status == "awaiting_approval" {
		row(w, "purge request "+res.PurgeID+" awaits approval by another operator:")
		row(w, "  craigctl archive purges approve "+res.PurgeID+" --service "+service)
		for _, id := range res.Candidates {
			row(w, "  "+id)
		}
		return
	}
	row(w, "PURGED")
	for _, id := range res.Purged {
		row(w, id)
	}
	for _, id := range res.Skipped {
		row(w, id+"  (skipped: held or no longer purgeable)")
	}
	if res.PurgeID != "" {
		row(w, "purge "+res.PurgeID+" certificate:")
		row(w, res.Certificate)
	}
}

func newApproveCmd(o *options) *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use: "approve PURGE_ID [--yes]", Short: "Approve (and so execute) another operator's purge request (asks to type yes)",
		Args: exactArgs(1, "PURGE_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseUUID("PURGE_ID", args[0])
			if err != nil {
				return err
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			var view purgeView
			if _, err := cl.do(cmd.Context(), http.MethodGet, "/admin/archive/purges/"+id.String(), nil, nil, &view); err != nil {
				return err
			}
			if err := o.confirm(cmd.Context(), yes, approvePlan(id.String(), cl.service, view)); err != nil {
				return err
			}
			sp := o.spinner("purging", "archives")
			var res purgeAnswer
			raw, err := cl.do(cmd.Context(), http.MethodPost, "/admin/archive/purges/"+id.String()+"/approve", nil, map[string]any{}, &res)
			sp.done()
			if err != nil {
				return err
			}
			return o.show(raw, func(w io.Writer) { purgeResult(w, cl.service, res) })
		},
	}
	c.Flags().BoolVar(&yes, "yes", false, "do not ask (required when stdin is not a terminal)")
	return c
}

// purgeView is GET /admin/archive/purges/{id}: a purge's frozen list.
type purgeView struct {
	Status      string `json:"status"`
	RequestedBy string `json:"requested_by"`
	Archives    []struct {
		ArchiveID      string  `json:"archive_id"`
		Table          string  `json:"table"`
		RecordCount    int     `json:"record_count"`
		FirstRecordAt  string  `json:"first_record_at"`
		LastRecordAt   string  `json:"last_record_at"`
		RetentionUntil *string `json:"retention_until"`
		Due            bool    `json:"due"`
	} `json:"archives"`
}

// approvePlan is what an approver reads before typing yes: who asked, and
// each archive the approval would destroy (those no longer due are marked:
// the approval skips them); the service's text is shown, never
// interpreted by the terminal.
func approvePlan(id, service string, v purgeView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Approving purge %s on %s (requested by %s, %s) executes it now: it destroys every archive below that is still purgeable.\n",
		id, service, sanitize(v.RequestedBy), sanitize(v.Status))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ARCHIVE\tTABLE\tRECORDS\tFIRST\tLAST\tRETENTION\tDUE")
	records := 0
	for _, a := range v.Archives {
		until, due := "-", "no: skipped"
		if a.RetentionUntil != nil {
			until = *a.RetentionUntil
		}
		if a.Due {
			due = "yes"
			records += a.RecordCount
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", sanitize(a.ArchiveID), sanitize(a.Table), a.RecordCount,
			sanitize(a.FirstRecordAt), sanitize(a.LastRecordAt), sanitize(until), due)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "%d archive(s), %d record(s) would be destroyed.", countDue(v), records)
	return b.String()
}

func countDue(v purgeView) int {
	n := 0
	for _, a := range v.Archives {
		if a.Due {
			n++
		}
	}
	return n
}
