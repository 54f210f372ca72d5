package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/craig/retention/kernel/identity"
)

// pending is one request awaiting a second person, with exactly what its
// approval destroys or changes.
type pending struct {
	Kind, Service, ID, RequestedBy, What string
	RequestedAt                          *time.Time
	Archives                             []record
	Rows                                 int64
	Cases                                int
	Mine                                 bool
}

// Confirm is what the approver types: the request's short id.
func (p pending) Confirm() string { return strings.ToLower(p.ID[:min(8, len(p.ID))]) }

type approvalsService struct {
	Name    string
	Pending []pending
	Err     *apiError
}

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	out := perService(c, r.Context(), s, func(ctx context.Context, cl caller) approvalsService {
		as := approvalsService{Name: cl.svc.Name}
		ps, err := c.pendingOf(ctx, cl, s)
		if err != nil {
			as.Err = asAPIError(err)
		}
		as.Pending = ps
		return as
	})
	c.render(w, r, http.StatusOK, "approvals", s, map[string]any{"Services": out})
}

func mine(s *session, by string) bool { return identity.Key(by) == identity.Key(s.subject) }

// pendingOf gathers a service's requests awaiting approval; a part the
// person's role cannot read is left out.
func (c *Console) pendingOf(ctx context.Context, cl caller, s *session) ([]pending, error) {
	ledger, _, err := cl.ledger(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]record{}
	for _, rec := range ledger {
		byID[rec.ArchiveID] = rec
	}
	var out []pending
	ps, err := c.pendingPurges(ctx, cl, s, byID)
	if err != nil {
		return nil, err
	}
	out = append(out, ps...)
	es, err := c.pendingExpungements(ctx, cl, s, byID)
	if err != nil {
		return nil, err
	}
	out = append(out, es...)
	vs, err := c.pendingSchedules(ctx, cl, s)
	if err != nil {
		return nil, err
	}
	out = append(out, vs...)
	if s.has("records:review") {
		ds, err := c.pendingDispositions(ctx, cl, s)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// pendingExpungements are the court orders awaiting approval, with the
// archives each rewrites.
func (c *Console) pendingExpungements(ctx context.Context, cl caller, s *session, byID map[string]record) ([]pending, error) {
	var out []pending
	var orders struct {
		Expungements []struct {
			ExpungeID   string    `json:"expunge_id"`
			Status      string    `json:"status"`
			OrderRef    string    `json:"order_ref"`
			Archives    []string  `json:"archives"`
			RequestedBy string    `json:"requested_by"`
			RequestedAt time.Time `json:"requested_at"`
		} `json:"expungements"`
	}
	if err := cl.do(ctx, http.MethodGet, "/admin/subjects/orders", nil, nil, &orders); err != nil {
		return nil, err
	}
	for _, e := range orders.Expungements {
		if e.Status != "awaiting_approval" {
			continue
		}
		p := pending{Kind: "expungement", Service: cl.svc.Name, ID: e.ExpungeID, RequestedBy: e.RequestedBy, RequestedAt: &e.RequestedAt,
			What: "Expungement under court order " + e.OrderRef + ": the case's rows are removed from each archive below (rewritten without them) and from the live table; the rest of each archive is kept.",
			Mine: mine(s, e.RequestedBy)}
		for _, id := range e.Archives {
			rec := byID[id]
			rec.ArchiveID = id
			p.Archives = append(p.Archives, rec)
		}
		out = append(out, p)
	}
	return out, nil
}

// pendingSchedules are the schedule versions awaiting approval.
func (c *Console) pendingSchedules(ctx context.Context, cl caller, s *session) ([]pending, error) {
	var out []pending
	var sched struct {
		History []struct {
			Version    string    `json:"version"`
			Status     string    `json:"status"`
			ProposedBy string    `json:"proposed_by"`
			ProposedAt time.Time `json:"proposed_at"`
			Nearer     int64     `json:"nearer"`
		} `json:"history"`
	}
	if err := cl.do(ctx, http.MethodGet, "/admin/retention/schedule", nil, nil, &sched); err != nil {
		return nil, err
	}
	for _, v := range sched.History {
		if v.Status == "proposed" {
			out = append(out, pending{Kind: "schedule", Service: cl.svc.Name, ID: v.Version, RequestedBy: v.ProposedBy, RequestedAt: &v.ProposedAt, Rows: v.Nearer,
				What: fmt.Sprintf("Records schedule version %s comes in force: %d row(s) could fall due earlier than under the version in force.", v.Version, v.Nearer),
				Mine: mine(s, v.ProposedBy)})
		}
	}
	return out, nil
}

func (c *Console) pendingPurges(ctx context.Context, cl caller, s *session, byID map[string]record) ([]pending, error) {
	var list struct {
		Purges []struct {
			PurgeID string `json:"purge_id"`
		} `json:"purges"`
	}
	if err := cl.do(ctx, http.MethodGet, "/admin/archive/purges", url.Values{"status": {"awaiting_approval"}}, nil, &list); err != nil {
		return nil, err
	}
	var out []pending
	for _, p := range list.Purges {
		var v struct {
			RequestedBy string    `json:"requested_by"`
			RequestedAt time.Time `json:"requested_at"`
			Archives    []struct {
				ArchiveID string `json:"archive_id"`
			} `json:"archives"`
		}
		if err := cl.do(ctx, http.MethodGet, "/admin/archive/purges/"+p.PurgeID, nil, nil, &v); err != nil {
			return nil, err
		}
		pe := pending{Kind: "purge", Service: cl.svc.Name, ID: p.PurgeID, RequestedBy: v.RequestedBy, RequestedAt: &v.RequestedAt,
			What: "Purge: each archive below is destroyed whole (every version of its objects), unless it stopped being due.", Mine: mine(s, v.RequestedBy)}
		for _, a := range v.Archives {
			rec := byID[a.ArchiveID]
			rec.ArchiveID = a.ArchiveID
			pe.Archives = append(pe.Archives, rec)
		}
		out = append(out, pe)
	}
	return out, nil
}

// batch is a disposition batch as GET /admin/dispositions/{id} answers.
type batch struct {
	DispositionID   string `json:"disposition_id"`
	Status          string `json:"status"`
	ScheduleVersion string `json:"schedule_version"`
	Rows            int64  `json:"rows"`
	ProposedBy      string `json:"proposed_by"`
	ProposedAt      time.Time
	Items           []struct {
		Item      string `json:"item"`
		Series    string `json:"series"`
		Authority string `json:"authority"`
		Rows      int64  `json:"rows"`
		Cases     []struct {
			Subject      string   `json:"subject"`
			Due          string   `json:"due"`
			RowsHot      int64    `json:"rows_hot"`
			RowsArchived int64    `json:"rows_archived"`
			Archives     []string `json:"archives"`
		} `json:"cases"`
	} `json:"items"`
}

func (c *Console) pendingDispositions(ctx context.Context, cl caller, s *session) ([]pending, error) {
	var list struct {
		Dispositions []struct {
			DispositionID string `json:"disposition_id"`
		} `json:"dispositions"`
	}
	if err := cl.do(ctx, http.MethodGet, "/admin/dispositions", url.Values{"status": {"proposed"}}, nil, &list); err != nil {
		if ae := asAPIError(err); ae.Code == "schedule_not_configured" {
			return nil, nil
		}
		return nil, err
	}
	var out []pending
	for _, d := range list.Dispositions {
		var b batch
		if err := cl.do(ctx, http.MethodGet, "/admin/dispositions/"+d.DispositionID, nil, nil, &b); err != nil {
			return nil, err
		}
		p := pending{Kind: "disposition", Service: cl.svc.Name, ID: b.DispositionID, RequestedBy: b.ProposedBy, Rows: b.Rows,
			Mine: mine(s, b.ProposedBy)}
		var items []string
		for _, it := range b.Items {
			p.Cases += len(it.Cases)
			items = append(items, fmt.Sprintf("%s (%s, %s): %d rows of %d case(s)", it.Item, it.Series, it.Authority, it.Rows, len(it.Cases)))
		}
		p.What = fmt.Sprintf("Disposition under schedule %s: %d row(s) of %d case(s) are destroyed; %s.", b.ScheduleVersion, b.Rows, p.Cases, strings.Join(items, "; "))
		out = append(out, p)
	}
	return out, nil
}

// approve approves one request as the signed-in person, after the typed
// confirmation matches.
func (c *Console) approve(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	f := r.PostForm
	cl, ok := c.caller(s, f.Get("service"))
	kind, id := f.Get("kind"), strings.TrimSpace(f.Get("id"))
	p := pending{ID: id}
	if !ok || id == "" {
		c.problem(w, r, http.StatusBadRequest, "Nothing to approve", "Open the Approvals page and approve from there. Nothing was changed.")
		return
	}
	if strings.ToLower(strings.TrimSpace(f.Get("confirm"))) != p.Confirm() {
		c.problem(w, r, http.StatusBadRequest, "The confirmation did not match",
			"Type the request's code ("+p.Confirm()+") exactly to approve it. Nothing was changed.")
		return
	}
	path := map[string]string{
		"purge": "/admin/archive/purges/%s/approve", "expungement": "/admin/subjects/expungements/%s/approve",
		"schedule": "/admin/retention/schedule/%s/approve", "disposition": "/admin/dispositions/%s/approve",
	}[kind]
	if path == "" {
		c.problem(w, r, http.StatusBadRequest, "Nothing to approve", "Unknown kind of request. Nothing was changed.")
		return
	}
	var res map[string]any
	o := outcome{Service: cl.svc.Name}
	// An approval may execute a destruction: bounded by ActTimeout, not a
	// page's; a call cut short is finished by the next approval.
	ctx, cancel := context.WithTimeout(r.Context(), ActTimeout)
	defer cancel()
	if err := cl.do(ctx, http.MethodPost, fmt.Sprintf(path, url.PathEscape(id)), nil, map[string]any{}, &res); err != nil {
		o.Err = asAPIError(err)
	} else {
		o.Lines = approvedLines(kind, res)
	}
	c.render(w, r, http.StatusOK, "result", s, map[string]any{"Title": "Approval of " + kind + " " + p.Confirm(), "Outcomes": []outcome{o}, "Back": "/approvals"})
}

func approvedLines(kind string, res map[string]any) []string {
	num := func(k string) string { return fmt.Sprint(res[k]) }
	switch kind {
	case "expungement":
		lines := []string{"executed: " + num("rewritten") + " archive(s) rewritten, " + num("rows_removed") + " row(s) removed",
			"certificate: " + num("certificate_key") + " (Certificates page)"}
		if salt, ok := res["salt"].(string); ok && salt != "" {
			lines = append(lines, "salt for the court's file (shown once, stored nowhere): "+salt)
		}
		return lines
	case "purge":
		if st, _ := res["status"].(string); st == "awaiting_approval" {
			return []string{"still awaiting approval"}
		}
		return []string{"executed: certificate " + num("certificate") + " (Certificates page)"}
	case "disposition":
		return []string{"executed: " + num("rows_destroyed") + " row(s) destroyed, " + num("archives_rewritten") + " archive(s) rewritten, " +
			num("archives_purged") + " purged; " + num("cases_destroyed") + " case(s) destroyed, " + num("cases_skipped") + " skipped",
			"certificate: " + num("certificate_key") + " (Certificates page)"}
	}
	return []string{"in force: " + num("version")}
}

type dueService struct {
	Name      string
	Version   string
	Items     []dueItem
	Batches   []batch
	Unindexed int64
	Err       *apiError
}

type dueItem struct {
	Item      string `json:"item"`
	Series    string `json:"series"`
	Authority string `json:"authority"`
	Action    string `json:"action"`
	Retain    string `json:"retain"`
	Rows      int64  `json:"rows"`
	Cases     []struct {
		Subject      string   `json:"subject"`
		Due          string   `json:"due"`
		RowsHot      int64    `json:"rows_hot"`
		RowsArchived int64    `json:"rows_archived"`
		Holds        []string `json:"holds"`
	} `json:"cases"`
}

func (c *Console) dispositionsPage(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	out := perService(c, r.Context(), s, func(ctx context.Context, cl caller) dueService {
		ds := dueService{Name: cl.svc.Name}
		var due struct {
			Version   string    `json:"version"`
			Unindexed int64     `json:"unindexed_archives"`
			Items     []dueItem `json:"items"`
		}
		if err := cl.do(ctx, http.MethodGet, "/admin/dispositions/due", nil, nil, &due); err != nil {
			ds.Err = asAPIError(err)
			return ds
		}
		ds.Version, ds.Items, ds.Unindexed = due.Version, due.Items, due.Unindexed
		return ds
	})
	c.render(w, r, http.StatusOK, "dispositions", s, map[string]any{"Services": out})
}

func (c *Console) dispositionFreeze(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	cl, ok := c.caller(s, r.PostForm.Get("service"))
	if !ok {
		c.problem(w, r, http.StatusBadRequest, "Choose a service", "Nothing was changed.")
		return
	}
	body := map[string]any{}
	if n := atoi(r.PostForm.Get("limit"), 0); n > 0 {
		body["limit"] = n
	}
	var b batch
	o := outcome{Service: cl.svc.Name}
	if err := cl.do(c.bounded(r), http.MethodPost, "/admin/dispositions", nil, body, &b); err != nil {
		o.Err = asAPIError(err)
	} else {
		o.Lines = []string{fmt.Sprintf("batch %s prepared: %d row(s); a second person approves or rejects it on the Approvals page", b.DispositionID, b.Rows)}
	}
	c.render(w, r, http.StatusOK, "result", s, map[string]any{"Title": "Disposition batch", "Outcomes": []outcome{o}, "Back": "/approvals"})
}

func (c *Console) dispositionReject(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	f := r.PostForm
	cl, ok := c.caller(s, f.Get("service"))
	if !ok {
		c.problem(w, r, http.StatusBadRequest, "Choose a service", "Nothing was changed.")
		return
	}
	body := map[string]any{"reason": f.Get("reason")}
	if d := strings.TrimSpace(f.Get("extend_until")); d != "" {
		body["extend_until"] = d
	}
	o := outcome{Service: cl.svc.Name}
	if err := cl.do(c.bounded(r), http.MethodPost, "/admin/dispositions/"+url.PathEscape(f.Get("id"))+"/reject", nil, body, nil); err != nil {
		o.Err = asAPIError(err)
	} else {
		o.Lines = []string{"batch rejected: its cases return to the schedule" + map[bool]string{true: ", kept until " + f.Get("extend_until"), false: ""}[body["extend_until"] != nil]}
	}
	c.render(w, r, http.StatusOK, "result", s, map[string]any{"Title": "Disposition rejected", "Outcomes": []outcome{o}, "Back": "/approvals"})
}

type certificateRow struct {
	Service        string
	Kind           string    `json:"kind"`
	ID             string    `json:"id"`
	CertificateKey string    `json:"certificate_key"`
	ExecutedAt     time.Time `json:"executed_at"`
	RequestedBy    string    `json:"requested_by"`
	ApprovedBy     *string   `json:"approved_by"`
}

func (c *Console) certificatesPage(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	type listed struct {
		rows []certificateRow
		err  *outcome
	}
	var rows []certificateRow
	var outs []outcome
	for _, l := range perService(c, r.Context(), s, func(ctx context.Context, cl caller) listed {
		var res struct {
			Certificates []certificateRow `json:"certificates"`
		}
		if err := cl.do(ctx, http.MethodGet, "/admin/archive/certificates", nil, nil, &res); err != nil {
			return listed{err: &outcome{Service: cl.svc.Name, Err: asAPIError(err)}}
		}
		for i := range res.Certificates {
			res.Certificates[i].Service = cl.svc.Name
		}
		return listed{rows: res.Certificates}
	}) {
		rows = append(rows, l.rows...)
		if l.err != nil {
			outs = append(outs, *l.err)
		}
	}
	c.render(w, r, http.StatusOK, "certificates", s, map[string]any{"Certificates": rows, "Errors": outs})
}

func (c *Console) certificate(r *http.Request, s *session) (caller, string, string, error) {
	q := r.URL.Query()
	cl, ok := c.caller(s, q.Get("service"))
	kind, id := q.Get("kind"), q.Get("id")
	if !ok || (kind != "purge" && kind != "expungement" && kind != "disposition") || id == "" {
		return cl, "", "", &apiError{Title: "No such certificate", Advice: "Open it from the Certificates page."}
	}
	return cl, kind, id, nil
}

func (c *Console) certificateView(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	cl, kind, id, err := c.certificate(r, s)
	if err != nil {
		ae := asAPIError(err)
		c.problem(w, r, http.StatusBadRequest, ae.Title, ae.Advice)
		return
	}
	var res struct {
		certificateRow
		Certificate  json.RawMessage `json:"certificate"`
		SHA256       string          `json:"sha256"`
		Verification struct {
			OK          bool      `json:"ok"`
			CheckedAt   time.Time `json:"checked_at"`
			NamesAct    bool      `json:"names_act"`
			Destroyed   int       `json:"archives_destroyed"`
			ObjectsGone int       `json:"objects_gone"`
			Remaining   []string  `json:"remaining"`
		} `json:"verification"`
	}
	if err := cl.do(c.bounded(r), http.MethodGet, "/admin/archive/certificates/"+kind+"/"+url.PathEscape(id), nil, nil, &res); err != nil {
		ae := asAPIError(err)
		c.problem(w, r, http.StatusBadGateway, ae.Title, ae.Advice)
		return
	}
	pretty, _ := json.MarshalIndent(res.Certificate, "", "  ")
	c.render(w, r, http.StatusOK, "certificate", s, map[string]any{"Service": cl.svc.Name, "Kind": kind, "ID": id, "C": res,
		"Pretty": string(pretty)})
}

func (c *Console) certificateDownload(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	cl, kind, id, err := c.certificate(r, s)
	if err != nil {
		ae := asAPIError(err)
		c.problem(w, r, http.StatusBadRequest, ae.Title, ae.Advice)
		return
	}
	body, err := cl.whole(c.bounded(r), "/admin/archive/certificates/"+kind+"/"+url.PathEscape(id)+"/object", maxAnswer)
	if err != nil {
		ae := asAPIError(err)
		c.problem(w, r, http.StatusBadGateway, ae.Title, ae.Advice)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", cl.svc.Name+"-"+kind+"-"+id+".json"))
	_, _ = w.Write(body)
}
