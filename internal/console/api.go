package console

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// maxAnswer bounds an answer the console reads whole (a listing, a
// certificate); a case's rows are read line by line up to maxCaseLines.
const (
	maxAnswer    = 16 << 20
	maxCaseLines = 10_000
)

// apiError is a service's refusal or silence, in words a person can act on.
type apiError struct {
	Service string
	Status  int // 0: the service did not answer
	Code    string
	Title   string
	Advice  string
}

func (e *apiError) Error() string { return e.Service + ": " + e.Title }

// caller calls one service's API with the person's token.
type caller struct {
	svc    Service
	token  string
	client *http.Client
	header http.Header
}

func (c *Console) callers(s *session) []caller {
	out := make([]caller, 0, len(c.cfg.Services))
	for _, svc := range c.cfg.Services {
		out = append(out, caller{svc: svc, token: s.token, client: c.client})
	}
	return out
}

// perService runs fn for every service of the fleet side by side, each
// bounded by the API timeout, and answers in the fleet file's order: a
// slow service costs a page at most one timeout, and the others answer.
func perService[T any](c *Console, ctx context.Context, s *session, fn func(context.Context, caller) T) []T {
	cls := c.callers(s)
	out := make([]T, len(cls))
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, c.cfg.APITimeout)
			defer cancel()
			out[i] = fn(cctx, cl)
		})
	}
	wg.Wait()
	return out
}

// bounded is a request's context bounded by the API timeout (its cancel
// runs when the request ends).
func (c *Console) bounded(r *http.Request) context.Context {
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.APITimeout)
	context.AfterFunc(r.Context(), cancel)
	return ctx
}

func (c *Console) caller(s *session, name string) (caller, bool) {
	for _, cl := range c.callers(s) {
		if cl.svc.Name == name {
			return cl, true
		}
	}
	return caller{}, false
}

func (cl caller) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
	u := strings.TrimSuffix(cl.svc.URL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cl.token)
	for k, v := range cl.header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.client.Do(req)
	if err != nil {
		return nil, &apiError{Service: cl.svc.Name, Title: cl.svc.Name + " does not answer",
			Advice: "The console could not reach " + cl.svc.Name + " (" + cause(err) + "). What the other services answered is shown; try again once " + cl.svc.Name + " is back, or tell your administrator."}
	}
	if resp.StatusCode >= 300 {
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, refusal(cl.svc.Name, resp.StatusCode, raw)
	}
	return resp, nil
}

// do calls and decodes a JSON answer into out (nil: discarded).
func (cl caller) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := cl.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return &apiError{Service: cl.svc.Name, Title: cl.svc.Name + " stopped answering", Advice: "The answer was cut off (" + cause(err) + "). Try again."}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &apiError{Service: cl.svc.Name, Status: resp.StatusCode, Title: cl.svc.Name + " answered something the console cannot read",
			Advice: "Tell your administrator: the console and " + cl.svc.Name + " may be of different versions."}
	}
	return nil
}

// whole calls and reads the whole answer, refusing one larger than limit
// or cut short.
func (cl caller) whole(ctx context.Context, path string, limit int64) ([]byte, error) {
	resp, err := cl.request(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil:
		return nil, &apiError{Service: cl.svc.Name, Title: "The download was cut short", Advice: cl.svc.Name + " stopped answering (" + cause(err) + "). Nothing was saved; download again."}
	case int64(len(body)) > limit:
		return nil, &apiError{Service: cl.svc.Name, Title: "Too large for the console", Advice: fmt.Sprintf("The answer is larger than %d MiB: export it with craigctl (subject fetch) instead.", limit>>20)}
	}
	return body, nil
}

// lines calls and reads an NDJSON answer line by line.
func (cl caller) lines(ctx context.Context, path string, fn func([]byte) error) error {
	resp, err := cl.request(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for n := 0; sc.Scan(); n++ {
		if n >= maxCaseLines {
			return &apiError{Service: cl.svc.Name, Title: "More rows than a page shows",
				Advice: fmt.Sprintf("Only the first %d rows are shown; download the NDJSON for every row.", maxCaseLines)}
		}
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return &apiError{Service: cl.svc.Name, Title: cl.svc.Name + " stopped answering", Advice: "The rows were cut off (" + cause(err) + "). Try again."}
	}
	return nil
}

func cause(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	default:
		return "network error"
	}
}

// refusal turns a service's error answer into words and what to do.
func refusal(svc string, status int, raw []byte) *apiError {
	var body struct {
		Error    string `json:"error"`
		Message  string `json:"message"`
		Required string `json:"required"`
		Knob     string `json:"knob"`
	}
	_ = json.Unmarshal(raw, &body)
	e := &apiError{Service: svc, Status: status, Code: body.Error}
	e.Title, e.Advice = explain(svc, status, body.Error, body.Required)
	return e
}

// explanations are the words for each refusal the services answer and
// what to do, with {svc}, {required} and {code} filled in.
var explanations = map[string][2]string{
	"invalid_token":              {"{svc} did not accept your sign-in", "Sign out and sign in again."},
	"insufficient_scope":         {"Your role does not allow this on {svc}", "It needs the permission {required}. Ask your administrator, or a colleague who has it."},
	"self_approval":              {"You cannot approve your own request", "A second person must approve it: ask a colleague with the approval role."},
	"held":                       {"A legal hold keeps records of this case on {svc}", "Release the hold (Holds page) or name it in the order, then request again."},
	"already_requested":          {"An order about this case already awaits approval on {svc}", "Approve or wait for that one (Approvals page)."},
	"already_running":            {"{svc} is busy with an archive pass or a purge", "Nothing was changed. Try again in a minute."},
	"not_awaiting_approval":      {"This request was already decided", "Reload the page: someone else approved or rejected it."},
	"not_awaiting_decision":      {"This request was already decided", "Reload the page: someone else approved or rejected it."},
	"subjects_not_indexed":       {"{svc} has archives not yet indexed by case", "Ask an administrator to run the subject index backfill, then try again."},
	"no_longer_purgeable":        {"The archives changed since this page was shown", "Reload the page and review again."},
	"purged":                     {"The archives changed since this page was shown", "Reload the page and review again."},
	"nothing_due":                {"Nothing is due for disposition on {svc}", "There is nothing to review today."},
	"no_schedule_in_force":       {"No records schedule is in force on {svc}", "A schedule version must be proposed and approved first."},
	"schedule_changed":           {"The records schedule changed since this batch was prepared", "Reject it and prepare a new batch."},
	"order_ref_mismatch":         {"That order reference does not open this record", "Check the court order's reference and type it exactly."},
	"restored_behind_journal":    {"{svc} was restored from a backup and is catching up", "Nothing was changed. An administrator must run its reconcile before records can be changed."},
	"store_not_configured":       {"{svc} is not set up for this", "Tell your administrator ({code})."},
	"subject_key_not_configured": {"{svc} is not set up for this", "Tell your administrator ({code})."},
	"schedule_not_configured":    {"{svc} is not set up for this", "Tell your administrator ({code})."},
	"orphan_uploads_left":        {"{svc} has unfinished uploads to clear first", "Nothing was destroyed. Try the approval again later."},
	"journal_not_stored":         {"Done, but its copy in the archive store is not written yet", "The act is recorded; the copy is written by the next act. No need to repeat it."},
	"not_found":                  {"Not found on {svc}", "It may have been removed, or belongs to another service. Reload the page."},
	"invalid_request":            {"{svc} refused the request as malformed", "Check what you typed (dates as YYYY-MM-DD, case numbers as case:17) and try again."},
	"invalid_schedule":           {"{svc} refused the request as malformed", "Check what you typed (dates as YYYY-MM-DD, case numbers as case:17) and try again."},
}

// explain is the words for a refusal and what to do.
func explain(svc string, status int, code, required string) (string, string) {
	if e, ok := explanations[code]; ok {
		r := strings.NewReplacer("{svc}", svc, "{required}", required, "{code}", code)
		return r.Replace(e[0]), r.Replace(e[1])
	}
	switch {
	case status == http.StatusNotFound:
		return "Not found on " + svc, "This service may not keep archives, or the record does not exist."
	case status >= 500:
		return svc + " failed to carry this out", "Nothing is assumed done. Try again; if it persists, tell your administrator."
	}
	return fmt.Sprintf("%s refused the request (%d)", svc, status), "Reload the page and try again."
}
