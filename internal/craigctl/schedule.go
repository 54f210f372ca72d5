package craigctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/craig/retention/kernel/schedule"
)

// scheduleState is a service's answer of GET /admin/retention/schedule.
type scheduleState struct {
	Series  []string `json:"series"`
	InForce *struct {
		Version    string `json:"version"`
		ApprovedBy string `json:"approved_by"`
		ApprovedAt string `json:"approved_at"`
	} `json:"in_force"`
	History []struct {
		Version    string  `json:"version"`
		Status     string  `json:"status"`
		ProposedBy string  `json:"proposed_by"`
		ApprovedBy *string `json:"approved_by"`
		Nearer     int64   `json:"nearer"`
	} `json:"history"`
}

func newScheduleCmd(o *options) *cobra.Command {
	var fleet string
	return group("schedule", "The records schedule: propose, approve and show its versions (ADR-073)",
		newSchedulePropose(o, &fleet), newScheduleApprove(o, &fleet), newScheduleShow(o, &fleet))
}

// scheduleTargets are the services a schedule command goes to (--service's,
// or every archiving service of the fleet file), with their schedules.
func (o *options) scheduleTargets(ctx context.Context, fleet string) ([]*client, []scheduleState, error) {
	if fleet != "" && o.service != "" {
		return nil, nil, usageErr("--service or --fleet, not both")
	}
	cls, err := o.subjectTargets(fleet)
	if err != nil {
		return nil, nil, err
	}
	if fleet != "" {
		if cls, _, err = archiving(ctx, cls, ""); err != nil {
			return nil, nil, err
		}
		if len(cls) == 0 {
			return nil, nil, fmt.Errorf("no service of the fleet archives: no schedule to keep")
		}
	}
	states := make([]scheduleState, len(cls))
	for i, cl := range cls {
		if _, err := cl.do(ctx, http.MethodGet, "/admin/retention/schedule", nil, nil, &states[i]); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", cl.service, err)
		}
	}
	return cls, states, nil
}

func newSchedulePropose(o *options, fleet *string) *cobra.Command {
	c := &cobra.Command{
		Use:   "propose FILE (--service SVC | --fleet fleet.yaml)",
		Short: "Propose a records schedule version (YAML or JSON); a second identity approves it",
		Long: `Propose the records schedule in FILE (ADR-073): its version and items, each
naming a series (an archived table), an optional when: {classification},
its clocks (starts: record, case.closed), retain (an ISO-8601 period or
permanent), action (review or destroy) and authority. With --fleet, each
archiving service gets the items of its own tables (an item naming a table
no service archives is refused before anything is sent). Prints one line per
service: {"service", "version", "status", "nearer", "nearer_series"}; nearer
counts the rows some row of which the version could make due earlier than
the version in force: its approval then needs archive:purge.`,
		Args: exactArgs(1, "FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readLimited(args[0], schedule.MaxDocument)
			if err != nil {
				return usageErr("%s: %w", args[0], err)
			}
			cls, states, err := o.scheduleTargets(cmd.Context(), *fleet)
			if err != nil {
				return err
			}
			var all []schedule.Series
			for _, st := range states {
				for _, s := range st.Series {
					all = append(all, schedule.Series{Table: s})
				}
			}
			doc, err := schedule.Parse(raw, all)
			if err != nil {
				return usageErr("%s: %w", args[0], err)
			}
			return o.postEach(cmd.Context(), cls, func(int) string { return "/admin/retention/schedule" }, func(i int) any {
				part := schedule.Document{Version: doc.Version}
				for _, it := range doc.Items {
					if slices.Contains(states[i].Series, it.Series) {
						part.Items = append(part.Items, it)
					}
				}
				return part
			})
		},
	}
	c.Flags().StringVar(fleet, "fleet", "", "every archiving service of this fleet file")
	return c
}

func newScheduleApprove(o *options, fleet *string) *cobra.Command {
	c := &cobra.Command{
		Use:   "approve VERSION (--service SVC | --fleet fleet.yaml)",
		Short: "Approve a proposed schedule version: it is in force from now (another identity than its proposer's)",
		Long: `Approve VERSION on each service: it is in force from the approval. The
proposer cannot approve (403, exit 5); a version that brings destruction
nearer than the one in force needs archive:purge besides records:schedule.
Prints one line per service: the version, its status and approver.`,
		Args: exactArgs(1, "VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cls, _, err := o.scheduleTargets(cmd.Context(), *fleet)
			if err != nil {
				return err
			}
			path := "/admin/retention/schedule/" + url.PathEscape(args[0]) + "/approve"
			return o.postEach(cmd.Context(), cls, func(int) string { return path }, func(int) any { return struct{}{} })
		},
	}
	c.Flags().StringVar(fleet, "fleet", "", "every archiving service of this fleet file")
	return c
}

func newScheduleShow(o *options, fleet *string) *cobra.Command {
	c := &cobra.Command{
		Use:   "show (--service SVC | --fleet fleet.yaml)",
		Short: "Show each service's schedule in force and its versions",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cls, states, err := o.scheduleTargets(cmd.Context(), *fleet)
			if err != nil {
				return err
			}
			if o.json {
				for i, cl := range cls {
					out := map[string]any{"service": cl.service, "schedule": states[i]}
					if err := json.NewEncoder(o.io.Out).Encode(out); err != nil {
						return err
					}
				}
				return nil
			}
			return o.show(nil, func(w io.Writer) {
				row(w, "SERVICE", "VERSION", "STATUS", "PROPOSED BY", "APPROVED BY", "NEARER")
				for i, cl := range cls {
					if len(states[i].History) == 0 {
						row(w, cl.service, "-", "settings (archive.retention.<table>_days)", "-", "-", "-")
					}
					for _, v := range states[i].History {
						row(w, cl.service, v.Version, v.Status, v.ProposedBy, orDash(v.ApprovedBy), v.Nearer)
					}
				}
			})
		},
	}
	c.Flags().StringVar(fleet, "fleet", "", "every archiving service of this fleet file")
	return c
}

// postEach posts body(i) to path(i) of each service in turn and prints each
// answer as one JSON line with its "service" (a version's document left
// out); the first failure stops it.
func (o *options) postEach(ctx context.Context, cls []*client, path func(int) string, body func(int) any) error {
	for i, cl := range cls {
		var ans map[string]any
		if _, err := cl.do(ctx, http.MethodPost, path(i), nil, body(i), &ans); err != nil {
			return fmt.Errorf("%s: %w", cl.service, err)
		}
		delete(ans, "document")
		ans["service"] = cl.service
		if err := json.NewEncoder(o.io.Out).Encode(ans); err != nil {
			return err
		}
	}
	return nil
}

// readLimited reads a file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	if strings.TrimSpace(string(raw)) == "" {
		return nil, fmt.Errorf("empty")
	}
	return raw, nil
}
