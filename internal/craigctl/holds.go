package craigctl

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/craig/retention/kernel/subject"
)

// hold is a legal hold as the API answers it.
type hold struct {
	ID         string     `json:"id"`
	Title      string     `json:"title"`
	Reason     string     `json:"reason"`
	Table      *string    `json:"table"`
	From       *time.Time `json:"from"`
	To         *time.Time `json:"to"`
	ArchiveIDs []string   `json:"archive_ids"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	Active     bool       `json:"active"`
	ReleasedBy *string    `json:"released_by"`
	Covers     []string   `json:"covers"`
	// SubjectHashes are the keyed hashes of the subjects held (the
	// service keeps no subject in clear).
	SubjectHashes []string `json:"subject_hashes"`
}

func holdTable(w io.Writer, hs ...hold) {
	row(w, "HOLD_ID", "ACTIVE", "TITLE", "SCOPE", "COVERS", "CREATED_BY", "CREATED_AT")
	for _, h := range hs {
		scope := fmt.Sprintf("%d archive(s)", len(h.ArchiveIDs))
		if h.Table != nil {
			scope = *h.Table + " [" + timeOr(h.From, "…") + ", " + timeOr(h.To, "…") + ")"
			if len(h.ArchiveIDs) > 0 {
				scope += fmt.Sprintf(" + %d archive(s)", len(h.ArchiveIDs))
			}
		}
		if len(h.SubjectHashes) > 0 {
			scope += fmt.Sprintf(" + %d subject(s)", len(h.SubjectHashes))
		}
		row(w, h.ID, h.Active, h.Title, scope, len(h.Covers), h.CreatedBy, h.CreatedAt.UTC().Format(time.RFC3339))
	}
}

func timeOr(t *time.Time, open string) string {
	if t == nil {
		return open
	}
	return t.UTC().Format(time.RFC3339)
}

func newHoldCreateCmd(o *options) *cobra.Command {
	var title, reason, table, from, to string
	var ids, subjects []string
	c := &cobra.Command{
		Use:   "create --title T --reason R (--archive-id ID ... | --table TABLE [--from T] [--to T] | --subject S ...)",
		Short: "Place a legal hold on archives, on every archive of a table overlapping [from, to), or on every archive about a subject, now and future",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := holdBody(title, reason, table, from, to, ids, subjects)
			if err != nil {
				return err
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			var h hold
			raw, err := cl.do(cmd.Context(), http.MethodPost, "/admin/archive/holds", nil, body, &h)
			if err != nil {
				return err
			}
			return o.show(raw, func(w io.Writer) { holdTable(w, h) })
		},
	}
	f := c.Flags()
	f.StringVar(&title, "title", "", "the matter (a hearing, a review, an audit)")
	f.StringVar(&reason, "reason", "", "why the records must be kept (a subpoena, a request)")
	f.StringArrayVar(&ids, "archive-id", nil, "an archive to hold (repeatable)")
	f.StringVar(&table, "table", "", "hold every archive of this table whose records overlap [--from, --to)")
	f.StringVar(&from, "from", "", "start of the held record times (RFC 3339 or a date; open when absent)")
	f.StringVar(&to, "to", "", "end (exclusive) of the held record times (open when absent)")
	f.StringArrayVar(&subjects, "subject", nil, "hold every archive about this subject, case:<n> or person:<n>, now and booked later (repeatable)")
	return c
}

// holdBody checks a hold's flags and builds its request.
func holdBody(title, reason, table, from, to string, ids, subjects []string) (map[string]any, error) {
	if strings.TrimSpace(title) == "" || strings.TrimSpace(reason) == "" {
		return nil, usageErr("--title and --reason are required")
	}
	if len(ids) == 0 && table == "" && len(subjects) == 0 {
		return nil, usageErr("name what to hold: --archive-id ID (repeatable), --table TABLE and/or --subject S (repeatable)")
	}
	if table == "" && (from != "" || to != "") {
		return nil, usageErr("--from and --to bound a --table hold")
	}
	body := map[string]any{"title": title, "reason": reason}
	for _, s := range ids {
		if _, err := parseUUID("--archive-id", s); err != nil {
			return nil, err
		}
	}
	if len(ids) > 0 {
		body["archive_ids"] = ids
	}
	for i, raw := range subjects {
		sub, err := subject.Parse(raw)
		if err != nil {
			return nil, usageErr("--subject: %w", err)
		}
		subjects[i] = sub.String()
	}
	if len(subjects) > 0 {
		body["subjects"] = subjects
	}
	if table != "" {
		body["table"] = table
	}
	for _, b := range []struct{ flag, v string }{{"from", from}, {"to", to}} {
		if b.v == "" {
			continue
		}
		t, err := parseTime(b.flag, b.v)
		if err != nil {
			return nil, err
		}
		body[b.flag] = t
	}
	return body, nil
}

func newHoldReleaseCmd(o *options) *cobra.Command {
	var reason string
	c := &cobra.Command{
		Use: "release HOLD_ID --reason R", Short: "Release a legal hold (its archives stay held while another hold covers them)",
		Args: exactArgs(1, "HOLD_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseUUID("HOLD_ID", args[0])
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return usageErr("--reason is required: why the hold ends")
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			var h hold
			raw, err := cl.do(cmd.Context(), http.MethodPost, "/admin/archive/holds/"+id.String()+"/release", nil, map[string]any{"reason": reason}, &h)
			if err != nil {
				return err
			}
			return o.show(raw, func(w io.Writer) { holdTable(w, h) })
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the hold ends (required)")
	return c
}

func newHoldListCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List every legal hold, active and released", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.target()
			if err != nil {
				return err
			}
			var ans struct {
				Holds []hold `json:"holds"`
			}
			raw, err := cl.do(cmd.Context(), http.MethodGet, "/admin/archive/holds", nil, nil, &ans)
			if err != nil {
				return err
			}
			return o.show(raw, func(w io.Writer) { holdTable(w, ans.Holds...) })
		},
	}
}

func newRetentionSetCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "set ARCHIVE_ID YYYY-MM-DD", Short: "Set an archive's retention date (the day it becomes purgeable, unless held)",
		Args: exactArgs(2, "ARCHIVE_ID and a date YYYY-MM-DD"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseUUID("ARCHIVE_ID", args[0])
			if err != nil {
				return err
			}
			if _, err := time.Parse(time.DateOnly, args[1]); err != nil {
				return usageErr("%q: a date YYYY-MM-DD", args[1])
			}
			cl, err := o.target()
			if err != nil {
				return err
			}
			raw, err := cl.do(cmd.Context(), http.MethodPut, "/admin/archive/records/"+id.String()+"/retention", nil, map[string]any{"retention_until": args[1]}, nil)
			if err != nil {
				return err
			}
			return o.show(raw, func(w io.Writer) { row(w, "archive "+id.String()+" is retained until "+args[1]) })
		},
	}
}

// record is one archive ledger row with its lifecycle state.
type record struct {
	ArchiveID      string     `json:"archive_id"`
	Table          string     `json:"table"`
	RecordCount    int        `json:"record_count"`
	FirstRecordAt  time.Time  `json:"first_record_at"`
	LastRecordAt   time.Time  `json:"last_record_at"`
	ArchivedBy     string     `json:"archived_by"`
	RetentionUntil *string    `json:"retention_until"`
	LegalHold      bool       `json:"legal_hold"`
	PurgedAt       *time.Time `json:"purged_at"`
	Holds          []string   `json:"holds"`
}

func newRecordsListCmd(o *options) *cobra.Command {
	var table, after string
	var held, purgeable bool
	var limit int
	lf := &decimal{v: &limit}
	c := &cobra.Command{
		Use: "list [--table T] [--held] [--purgeable] [--limit N] [--after ARCHIVE_ID]", Short: "List the archive ledger with each archive's retention, holds and purge state",
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if table != "" {
				q.Set("table", table)
			}
			if cmd.Flags().Changed("held") {
				q.Set("held", strconv.FormatBool(held))
			}
			if cmd.Flags().Changed("purgeable") {
				q.Set("purgeable", strconv.FormatBool(purgeable))
			}
			if lf.set {
				q.Set("limit", strconv.Itoa(limit))
			}
			if after != "" {
				if _, err := parseUUID("--after", after); err != nil {
					return err
				}
				q.Set("after", after)
			}
			return o.listRecords(cmd, q)
		},
	}
	f := c.Flags()
	f.StringVar(&table, "table", "", "only this table's archives")
	f.BoolVar(&held, "held", false, "only held archives (--held=false: only unheld)")
	f.BoolVar(&purgeable, "purgeable", false, "only archives a purge would take now")
	f.Var(lf, "limit", "at most N records (the service bounds it)")
	f.StringVar(&after, "after", "", "the page after this archive id")
	return c
}

func (o *options) listRecords(cmd *cobra.Command, q url.Values) error {
	cl, err := o.target()
	if err != nil {
		return err
	}
	var ans struct {
		Records []record `json:"records"`
	}
	raw, err := cl.do(cmd.Context(), http.MethodGet, "/admin/archive/records", q, nil, &ans)
	if err != nil {
		return err
	}
	return o.show(raw, func(w io.Writer) {
		row(w, "ARCHIVE_ID", "TABLE", "RECORDS", "FIRST_RECORD_AT", "LAST_RECORD_AT", "RETAIN_UNTIL", "HELD", "PURGED_AT")
		for _, r := range ans.Records {
			purged := "-"
			if r.PurgedAt != nil {
				purged = r.PurgedAt.UTC().Format(time.RFC3339)
			}
			row(w, r.ArchiveID, r.Table, r.RecordCount, r.FirstRecordAt.UTC().Format(time.RFC3339), r.LastRecordAt.UTC().Format(time.RFC3339),
				orDash(r.RetentionUntil), r.LegalHold, purged)
		}
	})
}
