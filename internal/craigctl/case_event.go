package craigctl

import (
	"net/url"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/craig/retention/kernel/subject"
)

// caseEventTypes are the case events a records officer may type by hand.
var caseEventTypes = []string{"case.closed", "case.reopened", "case.merged"}

func newSubjectEventCmd(o *options) *cobra.Command {
	var typ, at, class, into, fleet string
	c := &cobra.Command{
		Use:   "event CASE --type T --at TIME [--classification C] [--into case:N] (--service SVC | --fleet fleet.yaml)",
		Short: "Record a case event by hand (a correction): case.closed, case.reopened or case.merged moves the case's clock",
		Long: `Record a case event for CASE (case:<n>) on each service, as the case system
would publish it (ADR-073): --type case.closed (with --classification, the
case's classification at closure), case.reopened (nothing of the case falls
due while it is open) or case.merged (--into the case it merged into, whose
clock its rows follow). --at is when it happened (RFC 3339). An event older
than the clock's last change is refused as stale (409, exit 1) and changes
nothing. Prints one line per service. Needs records:events.`,
		Args: exactArgs(1, "CASE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := subject.Parse(args[0])
			if err != nil || s.Kind() != subject.Case {
				return usageErr("%q is not a case (case:<digits>)", args[0])
			}
			if !slices.Contains(caseEventTypes, typ) {
				return usageErr("--type %q: one of %v", typ, caseEventTypes)
			}
			when, err := time.Parse(time.RFC3339Nano, at)
			if err != nil {
				return usageErr("--at %q is not an RFC 3339 time", at)
			}
			body := map[string]any{"type": typ, "at": when.UTC().Format(time.RFC3339Nano)}
			if class != "" {
				body["classification"] = class
			}
			if into != "" {
				t, err := subject.Parse(into)
				if err != nil || t.Kind() != subject.Case {
					return usageErr("--into %q is not a case (case:<digits>)", into)
				}
				body["into"] = t.String()
			}
			cls, _, err := o.scheduleTargets(cmd.Context(), fleet)
			if err != nil {
				return err
			}
			path := "/admin/subjects/" + url.PathEscape(s.String()) + "/events"
			return o.postEach(cmd.Context(), cls, func(int) string { return path }, func(int) any { return body })
		},
	}
	c.Flags().StringVar(&typ, "type", "", "case.closed, case.reopened or case.merged (required)")
	c.Flags().StringVar(&at, "at", "", "when it happened (RFC 3339, required)")
	c.Flags().StringVar(&class, "classification", "", "the case's classification at closure (case.closed)")
	c.Flags().StringVar(&into, "into", "", "the case it merged into (case.merged)")
	c.Flags().StringVar(&fleet, "fleet", "", "every archiving service of this fleet file")
	return c
}
