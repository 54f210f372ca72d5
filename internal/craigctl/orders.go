package craigctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/craig/retention/kernel/subject"
)

// orderFlags are a court order's reference and reason, and where it goes.
type orderFlags struct {
	orderRef, reason, fleet string
	holds                   []string
	yes                     bool
}

func (f *orderFlags) define(c *cobra.Command, holds bool) {
	c.Flags().StringVar(&f.orderRef, "order-ref", "", "the court order's reference (docket number), recorded with the act (required)")
	c.Flags().StringVar(&f.reason, "reason", "", "why, recorded with the act (required)")
	c.Flags().StringVar(&f.fleet, "fleet", "", "apply the order on every archiving service of this fleet file")
	c.Flags().BoolVar(&f.yes, "yes", false, "confirm without the typed question (the plan is still shown)")
	if holds {
		c.Flags().StringArrayVar(&f.holds, "hold", nil, "a hold the order names (it then does not block the order; repeatable; with --service only)")
	}
}

// archivingTargets are an order's services: --service's, or every
// archiving service of the fleet file that declares subjects of kind (""
// for any; a 404 from one fails the call).
func (o *options) archivingTargets(ctx context.Context, f orderFlags, reason bool, kind subject.Kind) ([]*client, error) {
	if f.fleet != "" && o.service != "" {
		return nil, usageErr("--service or --fleet, not both")
	}
	if strings.TrimSpace(f.orderRef) == "" || (reason && strings.TrimSpace(f.reason) == "") {
		return nil, usageErr("--order-ref and --reason are required")
	}
	cls, err := o.subjectTargets(f.fleet)
	if err != nil || f.fleet == "" {
		return cls, err
	}
	cls, _, err = archiving(ctx, cls, kind)
	if err == nil && len(cls) == 0 && kind != "" {
		return nil, fmt.Errorf("no archiving service of the fleet declares %s subjects: nothing to order", kind)
	}
	return cls, err
}

func newSubjectSealCmd(o *options, unseal bool) *cobra.Command {
	var f orderFlags
	verb, path := "seal", "seal"
	short := "Seal a subject under a court order: every read of its rows then answers as for rows that do not exist"
	if unseal {
		verb, path = "unseal", "unseal"
		short = "Lift a subject's seal under a court order"
	}
	c := &cobra.Command{
		Use:   verb + " SUBJECT --order-ref REF --reason R (--service SVC | --fleet fleet.yaml) [--yes]",
		Short: short,
		Long: short + `. Idempotent: a service where it is already so
changes nothing. Prints one line per service: {"service", "subject",
"sealed", "order_ref"}. Objects are not changed and retention runs as
before.`,
		Args: exactArgs(1, "SUBJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := subject.Parse(args[0])
			if err != nil {
				return usageErr("SUBJECT: %w", err)
			}
			cls, err := o.archivingTargets(cmd.Context(), f, true, s.Kind())
			if err != nil {
				return err
			}
			if err := o.confirm(cmd.Context(), f.yes, fmt.Sprintf("%s %s under order %q on: %s", verb, s, f.orderRef, serviceNames(cls))); err != nil {
				return err
			}
			body := map[string]string{"order_ref": f.orderRef, "reason": f.reason}
			for _, cl := range cls {
				var ans map[string]any
				if _, err := cl.do(cmd.Context(), http.MethodPost, "/admin/subjects/"+url.PathEscape(s.String())+"/"+path, nil, body, &ans); err != nil {
					return fmt.Errorf("%s: %w", cl.service, err)
				}
				ans["service"] = cl.service
				if err := json.NewEncoder(o.io.Out).Encode(ans); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f.define(c, false)
	return c
}

// expungeRequested is a service's answer to an expunge request.
type expungeRequested struct {
	ExpungeID string   `json:"expunge_id"`
	Archives  []string `json:"archives"`
}

func newSubjectExpungeCmd(o *options) *cobra.Command {
	var f orderFlags
	c := &cobra.Command{
		Use:   "expunge SUBJECT --order-ref REF --reason R (--service SVC | --fleet fleet.yaml) [--hold ID ...] [--yes]",
		Short: "Request a court-ordered expungement of a subject on every service (a second operator approves with approve-expunge)",
		Long: `Request the expungement of SUBJECT's rows, hot and archived, on each
service: each answers its expunge_id and the archives that hold the subject
(they will be rewritten without its rows). Nothing is removed until another
identity runs ` + "`craigctl subject approve-expunge --order-ref REF`" + `. A
service where an order about the subject already awaits approval answers
with it (nothing filed twice). A hold the order does not name blocks it (exit 1, the answer
naming them), and nothing is recorded.`,
		Args: exactArgs(1, "SUBJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := subject.Parse(args[0])
			if err != nil {
				return usageErr("SUBJECT: %w", err)
			}
			cls, err := o.archivingTargets(cmd.Context(), f, true, s.Kind())
			if err != nil {
				return err
			}
			if len(f.holds) > 0 && len(cls) > 1 {
				return usageErr("--hold names one service's hold: use it with --service")
			}
			if err := o.confirm(cmd.Context(), f.yes, fmt.Sprintf("request the expungement of %s under order %q on: %s", s, f.orderRef, serviceNames(cls))); err != nil {
				return err
			}
			body := map[string]any{"order_ref": f.orderRef, "reason": f.reason}
			if len(f.holds) > 0 {
				body["holds"] = f.holds
			}
			for _, cl := range cls {
				ans, err := o.requestExpunge(cmd.Context(), cl, s, f.orderRef, body)
				if err != nil {
					return fmt.Errorf("%s: %w", cl.service, err)
				}
				line := map[string]any{"service": cl.service, "expunge_id": ans.ExpungeID, "archives": ans.Archives}
				if err := json.NewEncoder(o.io.Out).Encode(line); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f.define(c, true)
	return c
}

// requestExpunge files the order on one service; a service where an
// order about the same subject already waits answers 409
// already_requested with its id, which is then the answer (the service
// knows the subject; craigctl keys nothing by reference alone).
func (o *options) requestExpunge(ctx context.Context, cl *client, s subject.Subject, _ string, body any) (expungeRequested, error) {
	var ans expungeRequested
	_, err := cl.do(ctx, http.MethodPost, "/admin/subjects/"+url.PathEscape(s.String())+"/expunge", nil, body, &ans)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "already_requested" {
		return ans, err
	}
	id, _ := ae.Body["expunge_id"].(string)
	l, lerr := listOrders(ctx, cl)
	if lerr != nil {
		return ans, lerr
	}
	for _, e := range l.Expungements {
		if e.ExpungeID == id {
			return expungeRequested{ExpungeID: id, Archives: e.Archives}, nil
		}
	}
	return ans, err
}

// orderListing is GET /admin/subjects/orders.
type orderListing struct {
	Seals []struct {
		SubjectHash string `json:"subject_hash"`
		OrderRef    string `json:"order_ref"`
	} `json:"seals"`
	Expungements []struct {
		ExpungeID   string   `json:"expunge_id"`
		Status      string   `json:"status"`
		OrderRef    string   `json:"order_ref"`
		Archives    []string `json:"archives"`
		RequestedBy string   `json:"requested_by"`
	} `json:"expungements"`
}

func listOrders(ctx context.Context, cl *client) (orderListing, error) {
	var l orderListing
	_, err := cl.do(ctx, http.MethodGet, "/admin/subjects/orders", nil, nil, &l)
	return l, err
}

func newSubjectApproveExpungeCmd(o *options) *cobra.Command {
	var f orderFlags
	c := &cobra.Command{
		Use:   "approve-expunge --order-ref REF (--service SVC | --fleet fleet.yaml) [--yes]",
		Short: "Approve and execute a requested expungement on every service (another identity than the requester's)",
		Long: `Execute every expungement filed under REF and not executed yet on each
service (one court order may name several subjects), after a typed yes to
a plan listing each one's affected archives (as recorded at the request;
archives booked since are rewritten too). Each service rewrites
those archives without the subject's rows, deletes its hot rows and writes
its certificate; one line per service is printed: {"service",
"expunge_id", "rewritten", "rows_removed", "certificate_key", "salt",
"commitment"}. The salt is given ONCE, by the call that completes the
order: put it in the court's file (with the subject it opens the
commitment). Running it again changes nothing and prints no salt.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cls, err := o.archivingTargets(cmd.Context(), f, false, "") // an approval has no reason of its own: the request's is recorded
			if err != nil {
				return err
			}
			ids, plan, err := pendingOrders(cmd.Context(), cls, f.orderRef)
			if err != nil {
				return err
			}
			if err := o.confirm(cmd.Context(), f.yes, plan); err != nil {
				return err
			}
			for _, cl := range cls {
				for _, id := range ids[cl.service] {
					var ans map[string]any
					if _, err := cl.do(cmd.Context(), http.MethodPost, "/admin/subjects/expungements/"+id+"/approve", nil, map[string]any{}, &ans); err != nil {
						return fmt.Errorf("%s: %w", cl.service, err)
					}
					ans["service"] = cl.service
					if err := json.NewEncoder(o.io.Out).Encode(ans); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&f.orderRef, "order-ref", "", "the court order's reference the expungement was requested under (required)")
	c.Flags().StringVar(&f.fleet, "fleet", "", "approve on every archiving service of this fleet file")
	c.Flags().BoolVar(&f.yes, "yes", false, "confirm without the typed question (the plan is still shown)")
	return c
}

// errNoOrder: a service has no expungement under the reference.
var errNoOrder = errors.New("no expungement is filed under this order reference: run `craigctl subject expunge` first")

// pendingOrders finds, on each service, every order filed under ref that
// is not executed yet (one court order may name several subjects), and the
// plan that lists each one's affected archives as recorded at the request
// (the approval recomputes them: archives booked since are rewritten too).
func pendingOrders(ctx context.Context, cls []*client, ref string) (map[string][]string, string, error) {
	ids := map[string][]string{}
	var b strings.Builder
	fmt.Fprintf(&b, "execute the expungement(s) under order %q (destroys every version of the archives listed, after writing their successors; archives booked since the request are rewritten too):\n", ref)
	for _, cl := range cls {
		l, err := listOrders(ctx, cl)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", cl.service, err)
		}
		filed := false
		for _, e := range l.Expungements {
			if e.OrderRef != ref {
				continue
			}
			filed = true
			if e.Status == "executed" {
				fmt.Fprintf(&b, "  %s: %s already executed\n", cl.service, e.ExpungeID)
				continue
			}
			ids[cl.service] = append(ids[cl.service], e.ExpungeID)
			fmt.Fprintf(&b, "  %s: %s (%s), %d archive(s): %s\n", cl.service, e.ExpungeID, e.Status, len(e.Archives), strings.Join(e.Archives, ", "))
		}
		if !filed {
			return nil, "", fmt.Errorf("%s: %w", cl.service, errNoOrder)
		}
	}
	return ids, b.String(), nil
}

func serviceNames(cls []*client) string {
	names := make([]string, len(cls))
	for i, cl := range cls {
		names[i] = cl.service
	}
	return strings.Join(names, ", ")
}

// RuleCourtOrderEverywhere: a seal or an expungement applied on one
// archiving service is applied on every one (an order reaches every
// service's records).
const RuleCourtOrderEverywhere = "court_order_everywhere"

// fetchOrders asks every archiving service for its seals and orders (a
// 404: none).
func (o *options) fetchOrders(ctx context.Context, ff fleetFile, ws []Windows) (map[string]orderListing, error) {
	cls, err := o.fleetClients(ff)
	if err != nil {
		return nil, err
	}
	out := map[string]orderListing{}
	for i, cl := range cls {
		if ws[i].Archive == nil {
			continue
		}
		l, err := listOrders(ctx, cl)
		var ae *APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusServiceUnavailable) {
			out[cl.service] = orderListing{}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s orders: %w", cl.service, err)
		}
		out[cl.service] = l
	}
	return out, nil
}

// CheckCourtOrders reports every seal (by keyed hash) and every executed
// expungement (by order reference) present on some archiving services and
// not on others.
func CheckCourtOrders(orders map[string]orderListing) []Violation {
	sealed, expunged := map[string]map[string]bool{}, map[string]map[string]bool{}
	mark := func(m map[string]map[string]bool, k, svc string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][svc] = true
	}
	for svc, l := range orders {
		for _, s := range l.Seals {
			mark(sealed, s.SubjectHash, svc)
		}
		executed := map[string]int{}
		for _, e := range l.Expungements {
			if e.Status == "executed" {
				executed[e.OrderRef]++
			}
		}
		for ref, n := range executed { // one court order may name several subjects: compared by how many
			mark(expunged, fmt.Sprintf("%s\x00%d", ref, n), svc)
		}
	}
	services := make([]string, 0, len(orders))
	for svc := range orders {
		services = append(services, svc)
	}
	sort.Strings(services)
	var vs []Violation
	report := func(m map[string]map[string]bool, what func(k string) string) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			var with []string
			for _, svc := range services {
				if m[k][svc] {
					with = append(with, svc)
				}
			}
			for _, svc := range services {
				if !m[k][svc] {
					vs = append(vs, Violation{Rule: RuleCourtOrderEverywhere, Producer: with[0], Consumer: svc,
						Detail: fmt.Sprintf("%s on %v and not on %s: apply the order there too", what(k), with, svc)})
				}
			}
		}
	}
	report(sealed, func(k string) string {
		return fmt.Sprintf("a subject (keyed hash %s…) is sealed", k[:min(12, len(k))])
	})
	report(expunged, func(k string) string {
		ref, n, _ := strings.Cut(k, "\x00")
		return fmt.Sprintf("order %q is executed for %s subject(s)", ref, n)
	})
	return vs
}
