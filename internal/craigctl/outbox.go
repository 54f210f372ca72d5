package craigctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// deadLetterPage is a service's answer of GET /admin/outbox/dead-letters.
type deadLetterPage struct {
	DeadLetters []struct {
		ID             string  `json:"id"`
		EventType      string  `json:"event_type"`
		CreatedAt      string  `json:"created_at"`
		Attempts       int     `json:"attempts"`
		LastError      string  `json:"last_error"`
		DeadLetteredAt string  `json:"dead_lettered_at"`
		AgeSeconds     float64 `json:"age_seconds"`
		DeadForSeconds float64 `json:"dead_for_seconds"`
		RetriedBy      string  `json:"retried_by"`
	} `json:"dead_letters"`
	Total int64  `json:"total"`
	Next  string `json:"next"`
}

func newOutboxCmd(o *options) *cobra.Command {
	var fleet string
	dl := group("dead-letters", "Outbox rows the drain gave up on: list them, return one to the drain (ADR-075)",
		newDeadLettersList(o, &fleet), newDeadLettersRetry(o, &fleet))
	dl.PersistentFlags().StringVar(&fleet, "fleet", "", "every service of this fleet file")
	return group("outbox", "The transactional outbox: its dead letters", dl)
}

func newDeadLettersList(o *options, fleet *string) *cobra.Command {
	var limit int
	var after string
	c := &cobra.Command{
		Use:   "list (--service SVC | --fleet fleet.yaml) [--limit N] [--after ID]",
		Short: "List the outbox's dead letters: attempts, last error, age",
		Long: `List, on each service, the outbox rows the drain dead-lettered (a malformed
envelope, or one the broker refused outbox.max_attempts times), oldest dead
letter first: id, event type, attempts, how long dead, the event's age and
the last error. The payload is never shown. --limit (1..1000, 100) bounds a
page; --after ID continues after the last row of the previous one (--service
only). A service that does not answer is reported and the others listed
(exit 1). Needs outbox:read.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := listQuery(limit, cmd.Flags().Changed("limit"), after, *fleet)
			if err != nil {
				return err
			}
			cls, err := o.outboxTargets(*fleet)
			if err != nil {
				return err
			}
			pages := make([]*deadLetterPage, len(cls))
			var failed []error
			for i, cl := range cls {
				var p deadLetterPage
				if _, err := cl.do(cmd.Context(), http.MethodGet, "/admin/outbox/dead-letters", q, nil, &p); err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", cl.service, err))
					continue
				}
				pages[i] = &p
			}
			if err := o.printDeadLetters(cls, pages); err != nil {
				return err
			}
			return fleetErr(failed)
		},
	}
	c.Flags().IntVar(&limit, "limit", 0, "the most dead letters per service (1..1000; the service's default: 100)")
	c.Flags().StringVar(&after, "after", "", "continue after this dead letter (the previous page's next)")
	return c
}

// listQuery checks list's flags and makes its query.
func listQuery(limit int, limitSet bool, after, fleet string) (url.Values, error) {
	q := url.Values{}
	if limitSet {
		if limit < 1 || limit > 1000 {
			return nil, usageErr("--limit %d: a number from 1 to 1000", limit)
		}
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		if fleet != "" {
			return nil, usageErr("--after pages one service's listing: use it with --service")
		}
		if _, err := eventID(after); err != nil {
			return nil, err
		}
		q.Set("after", strings.ToLower(after))
	}
	return q, nil
}

// printDeadLetters prints each service's page: one JSON line per service
// with --json, else a table.
func (o *options) printDeadLetters(cls []*client, pages []*deadLetterPage) error {
	if o.json {
		for i, cl := range cls {
			if pages[i] == nil {
				continue
			}
			if err := json.NewEncoder(o.io.Out).Encode(map[string]any{"service": cl.service, "dead_letters": pages[i]}); err != nil {
				return err
			}
		}
		return nil
	}
	return o.show(nil, func(w io.Writer) {
		row(w, "SERVICE", "ID", "EVENT TYPE", "ATTEMPTS", "DEAD FOR", "AGE", "RETRIED BY", "LAST ERROR")
		for i, cl := range cls {
			p := pages[i]
			if p == nil {
				row(w, cl.service, "-", "-", "-", "-", "-", "-", "did not answer")
				continue
			}
			for _, d := range p.DeadLetters {
				row(w, cl.service, d.ID, d.EventType, d.Attempts, seconds(d.DeadForSeconds), seconds(d.AgeSeconds), dashIfEmpty(d.RetriedBy), d.LastError)
			}
			if p.Next != "" {
				row(w, cl.service, "-", "-", "-", "-", "-", "-", fmt.Sprintf("%d in all: more with --after %s", p.Total, p.Next))
			}
		}
	})
}

func newDeadLettersRetry(o *options, fleet *string) *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID... (--service SVC | --fleet fleet.yaml)",
		Short: "Return dead letters to the drain, attempts reset (after fixing what refused them)",
		Long: `Return each dead letter ID to its service's drain with its attempts reset; the
service records who (the token's subject) and when, and logs it. The drain
then publishes it once; consumers' inbox dedup absorbs a second delivery.
With --fleet each ID is looked for on every service (an event lives in one
outbox). An ID that is not a dead letter (pending, published, unknown) is
reported and the rest retried (exit 1). Prints each outcome as a JSON line.
Needs outbox:retry.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("expected at least one ID, got none")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var ids []uuid.UUID // each once, whatever its spelling
			for _, a := range args {
				id, err := eventID(a)
				if err != nil {
					return err
				}
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
			cls, err := o.outboxTargets(*fleet)
			if err != nil {
				return err
			}
			var failed []error
			for _, id := range ids {
				if err := o.retryOne(cmd.Context(), cls, id); err != nil {
					failed = append(failed, err)
				}
			}
			return fleetErr(failed)
		},
	}
}

// retryOne retries id on the first service that has it as a dead letter.
// With a fleet, a service that answers 404 (another outbox), refuses the
// token, fails (5xx) or does not answer is passed over for the next (the
// ones not asked are reported); a service's own answer about the id (a 409:
// it is pending or published there; a 400) ends the search. The id is
// reported missing only when no service had it; the exit code is then that
// of the services not asked when they share one (5: every one refused the
// token), else 1.
func (o *options) retryOne(ctx context.Context, cls []*client, id uuid.UUID) error {
	path := "/admin/outbox/dead-letters/" + id.String() + "/retry"
	var unasked []error
	for _, cl := range cls {
		var ans map[string]any
		_, err := cl.do(ctx, http.MethodPost, path, nil, struct{}{}, &ans)
		var ae *APIError
		switch {
		case err == nil:
			for _, u := range unasked {
				_, _ = fmt.Fprintf(o.io.Err, "craigctl: %s: not asked: %v\n", id, u)
			}
			ans["service"] = cl.service
			return json.NewEncoder(o.io.Out).Encode(ans)
		case len(cls) == 1:
			return fmt.Errorf("%s: %s: %w", cl.service, id, err)
		case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
			continue // another service's outbox
		case errors.As(err, &ae) && ae.Status < http.StatusInternalServerError &&
			ae.Status != http.StatusUnauthorized && ae.Status != http.StatusForbidden:
			return fmt.Errorf("%s: %s: %w", cl.service, id, err) // its answer about the id
		}
		unasked = append(unasked, fmt.Errorf("%s: %w", cl.service, err))
	}
	if len(unasked) > 0 {
		code := exitCode(unasked[0])
		for _, u := range unasked[1:] {
			if exitCode(u) != code {
				code = ExitFailed
			}
		}
		return &ExitError{Code: code, Err: fmt.Errorf("%s: no service that answered has it; not asked: %w", id, errors.Join(unasked...))}
	}
	return fmt.Errorf("%s: no service of the fleet has it", id)
}

// outboxTargets are the services an outbox command calls: --service, or
// every service of --fleet (not only the archiving ones: every service has
// an outbox).
func (o *options) outboxTargets(fleet string) ([]*client, error) {
	if fleet != "" && o.service != "" {
		return nil, usageErr("--service or --fleet, not both")
	}
	return o.subjectTargets(fleet)
}

// eventID parses an outbox event id.
func eventID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 || id == uuid.Nil {
		return uuid.Nil, usageErr("%q is not an event id (a UUID)", s)
	}
	return id, nil
}

// fleetErr is nil when nothing failed; else the failures joined, with the
// exit code they share (every one an authentication refusal: 5), or 1.
func fleetErr(failed []error) error {
	if len(failed) == 0 {
		return nil
	}
	code := exitCode(failed[0])
	for _, err := range failed[1:] {
		if exitCode(err) != code {
			code = ExitFailed
		}
	}
	if len(failed) == 1 {
		return failed[0]
	}
	return &ExitError{Code: code, Err: errors.Join(failed...)}
}

// seconds shows a duration in seconds rounded for a person.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d >= 48*time.Hour {
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	return d.Round(time.Second).String()
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
