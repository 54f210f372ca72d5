package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxRecordPages bounds the ledger pages the fleet page reads per service
// (1,000 archives each): beyond, the counts say "at least".
const maxRecordPages = 20

// outcome is what one service answered to an act.
type outcome struct {
	Service string
	Lines   []string
	Err     *apiError
}

func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return &apiError{Title: "The call failed", Advice: err.Error()}
}

// record is the part of a ledger row the pages show.
type record struct {
	ArchiveID      string     `json:"archive_id"`
	Table          string     `json:"table"`
	RecordCount    int        `json:"record_count"`
	FirstRecordAt  time.Time  `json:"first_record_at"`
	LastRecordAt   time.Time  `json:"last_record_at"`
	ArchivedAt     time.Time  `json:"archived_at"`
	RetentionUntil *string    `json:"retention_until"`
	LegalHold      bool       `json:"legal_hold"`
	PurgedAt       *time.Time `json:"purged_at"`
}

// ledger reads a service's ledger (at most maxRecordPages pages).
func (cl caller) ledger(ctx context.Context) ([]record, bool, error) {
	var all []record
	after := ""
	for range maxRecordPages {
		q := url.Values{"limit": {"1000"}}
		if after != "" {
			q.Set("after", after)
		}
		var page struct {
			Records []record `json:"records"`
		}
		if err := cl.do(ctx, http.MethodGet, "/admin/archive/records", q, nil, &page); err != nil {
			return nil, false, err
		}
		all = append(all, page.Records...)
		if len(page.Records) < 1000 {
			return all, false, nil
		}
		after = page.Records[len(page.Records)-1].ArchiveID
	}
	return all, true, nil
}

// tableState is one table of the fleet page.
type tableState struct {
	Table                            string
	Kept, Held, Due, Undated, Purged int
	LastArchived                     *time.Time
}

type fleetService struct {
	Name      string
	InForce   string
	Tables    []tableState
	Truncated bool
	Err       *apiError
}

func (c *Console) fleetPage(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	c.render(w, r, http.StatusOK, "fleet", s, map[string]any{"Services": c.fleet(r.Context(), s)})
}

func (c *Console) fleet(ctx context.Context, s *session) []fleetService {
	today := time.Now().UTC().Format(time.DateOnly)
	return perService(c, ctx, s, func(ctx context.Context, cl caller) fleetService {
		fs := fleetService{Name: cl.svc.Name, InForce: "none (table settings)"}
		var sched struct {
			InForce *struct {
				Version string `json:"version"`
			} `json:"in_force"`
		}
		if err := cl.do(ctx, http.MethodGet, "/admin/retention/schedule", nil, nil, &sched); err != nil {
			fs.Err = asAPIError(err)
			return fs
		}
		if sched.InForce != nil {
			fs.InForce = sched.InForce.Version
		}
		recs, truncated, err := cl.ledger(ctx)
		if err != nil {
			fs.Err = asAPIError(err)
			return fs
		}
		fs.Truncated = truncated
		fs.Tables = tally(recs, today)
		sort.Slice(fs.Tables, func(i, j int) bool { return fs.Tables[i].Table < fs.Tables[j].Table })
		return fs
	})
}

// tally counts a ledger's archives per table.
func tally(recs []record, today string) []tableState {
	byTable := map[string]*tableState{}
	for _, rec := range recs {
		t := byTable[rec.Table]
		if t == nil {
			t = &tableState{Table: rec.Table}
			byTable[rec.Table] = t
		}
		if t.LastArchived == nil || rec.ArchivedAt.After(*t.LastArchived) {
			at := rec.ArchivedAt
			t.LastArchived = &at
		}
		switch {
		case rec.PurgedAt != nil:
			t.Purged++
			continue
		case rec.LegalHold:
			t.Held++
		case rec.RetentionUntil == nil:
			t.Undated++
		case *rec.RetentionUntil <= today:
			t.Due++
		}
		t.Kept++
	}
	out := make([]tableState, 0, len(byTable))
	for _, t := range byTable {
		out = append(out, *t)
	}
	return out
}

// fleetVerify runs a verification of every service's ledger against the
// store (a read: nothing changes) and shows it.
func (c *Console) fleetVerify(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	deep := r.PostForm.Get("deep") == "on"
	outs := perService(c, r.Context(), s, func(ctx context.Context, cl caller) outcome {
		o := outcome{Service: cl.svc.Name}
		var rep struct {
			Checked     int `json:"checked"`
			Failed      int `json:"failed"`
			OrphanCount int `json:"orphan_count"`
		}
		if err := cl.do(ctx, http.MethodPost, "/admin/archive/verify", nil, map[string]any{"deep": deep}, &rep); err != nil {
			o.Err = asAPIError(err)
		} else {
			o.Lines = append(o.Lines, fmt.Sprintf("%d archives checked, %d failed, %d objects no ledger row names", rep.Checked, rep.Failed, rep.OrphanCount))
		}
		return o
	})
	title := "Verification of every ledger against the store"
	if deep {
		title = "Deep verification (every archive's content) of every ledger"
	}
	c.render(w, r, http.StatusOK, "result", s, map[string]any{"Title": title, "Outcomes": outs, "Back": "/"})
}

// caseRow is one row of a case.
type caseRow struct {
	Service, Table, Source, ArchiveID, ID, Doc string
}

type caseService struct {
	Name                  string
	Rows                  []caseRow
	Hot, Archived         int
	Archives              []string
	Disposed, PurgedCount int
	Err                   *apiError
}

var subjectPattern = regexp.MustCompile(`^(?i)(case|person):[0-9]{1,18}$`)

func (c *Console) casePage(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	subject := strings.TrimSpace(r.URL.Query().Get("subject"))
	orderRef := strings.TrimSpace(r.URL.Query().Get("order_ref"))
	data := map[string]any{"Subject": subject, "OrderRef": orderRef, "SealedRead": s.has("archive:sealed-read")}
	if subject == "" {
		c.render(w, r, http.StatusOK, "case", s, data)
		return
	}
	if !subjectPattern.MatchString(subject) {
		data["Invalid"] = true
		c.render(w, r, http.StatusBadRequest, "case", s, data)
		return
	}
	services, total := c.caseRows(r.Context(), s, subject, orderRef)
	data["Services"], data["Total"] = services, total
	c.render(w, r, http.StatusOK, "case", s, data)
}

func (c *Console) caseRows(ctx context.Context, s *session, subject, orderRef string) ([]caseService, int) {
	out := perService(c, ctx, s, func(ctx context.Context, cl caller) caseService {
		if orderRef != "" {
			cl.header = http.Header{"X-Craig-Order-Ref": {orderRef}}
		}
		cs := caseService{Name: cl.svc.Name}
		seen := map[string]bool{}
		err := cl.lines(ctx, "/admin/subjects/"+url.PathEscape(subject)+"/rows", func(line []byte) error {
			var l struct {
				Table     string          `json:"table"`
				Source    string          `json:"source"`
				ArchiveID *string         `json:"archive_id"`
				Row       json.RawMessage `json:"row"`
				Summary   *struct {
					PurgedArchives int               `json:"purged_archives"`
					Disposed       []json.RawMessage `json:"disposed"`
				} `json:"summary"`
			}
			if err := json.Unmarshal(line, &l); err != nil {
				return &apiError{Service: cl.svc.Name, Title: cl.svc.Name + " answered a line the console cannot read", Advice: "Download the NDJSON instead."}
			}
			if l.Summary != nil {
				cs.PurgedCount, cs.Disposed = l.Summary.PurgedArchives, len(l.Summary.Disposed)
				return nil
			}
			row := caseRow{Service: cl.svc.Name, Table: l.Table, Source: l.Source, Doc: string(l.Row)}
			var id struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(l.Row, &id)
			row.ID = id.ID
			if len(row.Doc) > 240 {
				row.Doc = row.Doc[:240] + "…"
			}
			if l.ArchiveID != nil {
				row.ArchiveID = *l.ArchiveID
				cs.Archived++
				if !seen[row.ArchiveID] {
					seen[row.ArchiveID] = true
					cs.Archives = append(cs.Archives, row.ArchiveID)
				}
			} else {
				cs.Hot++
			}
			cs.Rows = append(cs.Rows, row)
			return nil
		})
		if err != nil {
			cs.Err = asAPIError(err)
		}
		return cs
	})
	total := 0
	for _, cs := range out {
		total += len(cs.Rows)
	}
	return out, total
}

// caseDownload streams one service's NDJSON of the case as the service
// answered it (the archived documents verbatim).
func (c *Console) caseDownload(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	q := r.URL.Query()
	subject := strings.TrimSpace(q.Get("subject"))
	cl, ok := c.caller(s, q.Get("service"))
	if !ok || !subjectPattern.MatchString(subject) {
		c.problem(w, r, http.StatusBadRequest, "Nothing to download", "Choose a service and a case (case:17) on the Case page.")
		return
	}
	if ref := strings.TrimSpace(q.Get("order_ref")); ref != "" {
		cl.header = http.Header{"X-Craig-Order-Ref": {ref}}
	}
	ctx, cancel := context.WithTimeout(r.Context(), ActTimeout)
	defer cancel()
	body, err := cl.whole(ctx, "/admin/subjects/"+url.PathEscape(subject)+"/rows", maxDownload)
	if err == nil && !bytes.Contains(lastLine(body), []byte(`"summary"`)) {
		err = &apiError{Service: cl.svc.Name, Title: "The download was cut short", Advice: cl.svc.Name + " did not finish its answer. Nothing was saved; download again."}
	}
	if err != nil {
		ae := asAPIError(err)
		c.problem(w, r, http.StatusBadGateway, ae.Title, ae.Advice)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", cl.svc.Name+"-"+strings.ReplaceAll(strings.ToLower(subject), ":", "-")+".ndjson"))
	_, _ = w.Write(body)
}

// maxDownload bounds a case's NDJSON the console relays: it reads it whole
// first, so that a download is complete or refused, never cut short after
// its first bytes were sent. A larger case is exported with craigctl.
const maxDownload = 256 << 20

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// caseAct runs one act about a case on every service and shows what each
// answered.
func (c *Console) caseAct(w http.ResponseWriter, r *http.Request, s *session, title string,
	act func(ctx context.Context, cl caller, subject string) ([]string, error)) {
	subject := strings.TrimSpace(r.PostForm.Get("subject"))
	if !subjectPattern.MatchString(subject) {
		c.problem(w, r, http.StatusBadRequest, "That is not a case", "Type a case as case:17 (or a person as person:4). Nothing was changed.")
		return
	}
	outs := perService(c, r.Context(), s, func(ctx context.Context, cl caller) outcome {
		o := outcome{Service: cl.svc.Name}
		lines, err := act(ctx, cl, subject)
		if err != nil {
			o.Err = asAPIError(err)
		}
		o.Lines = lines
		return o
	})
	c.render(w, r, http.StatusOK, "result", s, map[string]any{"Title": title + " " + subject, "Outcomes": outs,
		"Back": "/case?subject=" + url.QueryEscape(subject)})
}

func (c *Console) caseHold(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	title, reason := r.PostForm.Get("title"), r.PostForm.Get("reason")
	c.caseAct(w, r, s, "Legal hold on", func(ctx context.Context, cl caller, subject string) ([]string, error) {
		var h struct {
			ID     string   `json:"id"`
			Covers []string `json:"covers"`
		}
		err := cl.do(ctx, http.MethodPost, "/admin/archive/holds", nil,
			map[string]any{"title": title, "reason": reason, "subjects": []string{subject}}, &h)
		if err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("hold %s placed: it keeps %d archive(s) now, and every archive of the case booked later", h.ID, len(h.Covers))}, nil
	})
}

func (c *Console) caseSeal(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	act := "seal"
	if r.PostForm.Get("action") == "unseal" {
		act = "unseal"
	}
	body := map[string]any{"order_ref": r.PostForm.Get("order_ref"), "reason": r.PostForm.Get("reason")}
	title := map[string]string{"seal": "Sealing of", "unseal": "Unsealing of"}[act]
	c.caseAct(w, r, s, title, func(ctx context.Context, cl caller, subject string) ([]string, error) {
		var res struct {
			Sealed   bool   `json:"sealed"`
			OrderRef string `json:"order_ref"`
		}
		if err := cl.do(ctx, http.MethodPost, "/admin/subjects/"+url.PathEscape(subject)+"/"+act, nil, body, &res); err != nil {
			return nil, err
		}
		if res.Sealed {
			return []string{"sealed under order " + res.OrderRef + ": its records read as unknown to anyone without the sealed-read role and this order"}, nil
		}
		return []string{"not sealed: its records read as before"}, nil
	})
}

func (c *Console) caseExpunge(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	body := map[string]any{"order_ref": r.PostForm.Get("order_ref"), "reason": r.PostForm.Get("reason")}
	c.caseAct(w, r, s, "Expungement requested for", func(ctx context.Context, cl caller, subject string) ([]string, error) {
		var res struct {
			ExpungeID string   `json:"expunge_id"`
			Archives  []string `json:"archives"`
		}
		if err := cl.do(ctx, http.MethodPost, "/admin/subjects/"+url.PathEscape(subject)+"/expunge", nil, body, &res); err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("order %s recorded: %d archive(s) hold the case. Nothing is removed until a second person approves it (Approvals page).", res.ExpungeID, len(res.Archives))}, nil
	})
}

// hold is a hold as the services list it.
type hold struct {
	ID            string     `json:"id"`
	Title         string     `json:"title"`
	Reason        string     `json:"reason"`
	Table         *string    `json:"table"`
	From          *time.Time `json:"from"`
	To            *time.Time `json:"to"`
	ArchiveIDs    []string   `json:"archive_ids"`
	CreatedBy     string     `json:"created_by"`
	CreatedAt     time.Time  `json:"created_at"`
	Active        bool       `json:"active"`
	ReleasedBy    *string    `json:"released_by"`
	ReleaseReason *string    `json:"release_reason"`
	SubjectHashes []string   `json:"subject_hashes"`
	Covers        []string   `json:"covers"`
}

type holdsService struct {
	Name  string
	Holds []hold
	Err   *apiError
}

func (c *Console) holdsPage(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	var names []string
	for _, svc := range c.cfg.Services {
		names = append(names, svc.Name)
	}
	out := perService(c, r.Context(), s, func(ctx context.Context, cl caller) holdsService {
		hs := holdsService{Name: cl.svc.Name}
		var res struct {
			Holds []hold `json:"holds"`
		}
		if err := cl.do(ctx, http.MethodGet, "/admin/archive/holds", nil, nil, &res); err != nil {
			hs.Err = asAPIError(err)
		}
		sort.SliceStable(res.Holds, func(i, j int) bool { return res.Holds[i].Active && !res.Holds[j].Active })
		hs.Holds = res.Holds
		return hs
	})
	c.render(w, r, http.StatusOK, "holds", s, map[string]any{"Services": out, "Names": names})
}

func (c *Console) holdCreate(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	f := r.PostForm
	cl, ok := c.caller(s, f.Get("service"))
	if !ok {
		c.problem(w, r, http.StatusBadRequest, "Choose a service", "A hold is placed on one service's archives. Nothing was changed.")
		return
	}
	body := map[string]any{"title": f.Get("title"), "reason": f.Get("reason")}
	if t := strings.TrimSpace(f.Get("table")); t != "" {
		body["table"] = t
	}
	for _, k := range []string{"from", "to"} {
		if v := strings.TrimSpace(f.Get(k)); v != "" {
			d, err := time.Parse(time.DateOnly, v)
			if err != nil {
				c.problem(w, r, http.StatusBadRequest, "A date could not be read", "Type dates as YYYY-MM-DD (UTC). Nothing was changed.")
				return
			}
			body[k] = d.UTC().Format(time.RFC3339)
		}
	}
	if ids := strings.Fields(f.Get("archive_ids")); len(ids) > 0 {
		body["archive_ids"] = ids
	}
	if subs := strings.Fields(f.Get("subjects")); len(subs) > 0 {
		body["subjects"] = subs
	}
	o := outcome{Service: cl.svc.Name}
	var h hold
	if err := cl.do(c.bounded(r), http.MethodPost, "/admin/archive/holds", nil, body, &h); err != nil {
		o.Err = asAPIError(err)
	} else {
		o.Lines = []string{fmt.Sprintf("hold %s placed: it keeps %d archive(s) now", h.ID, len(h.Covers))}
	}
	c.render(w, r, http.StatusOK, "result", s, map[string]any{"Title": "Legal hold", "Outcomes": []outcome{o}, "Back": "/holds"})
}

func (c *Console) holdRelease(w http.ResponseWriter, r *http.Request, s *session, _ string) {
	f := r.PostForm
	cl, ok := c.caller(s, f.Get("service"))
	if !ok {
		c.problem(w, r, http.StatusBadRequest, "Choose a service", "Nothing was changed.")
		return
	}
	o := outcome{Service: cl.svc.Name}
	if err := cl.do(c.bounded(r), http.MethodPost, "/admin/archive/holds/"+url.PathEscape(f.Get("id"))+"/release", nil,
		map[string]any{"reason": f.Get("reason")}, nil); err != nil {
		o.Err = asAPIError(err)
	} else {
		o.Lines = []string{"hold " + f.Get("id") + " released: its archives follow their retention dates again"}
	}
	c.render(w, r, http.StatusOK, "result", s, map[string]any{"Title": "Hold released", "Outcomes": []outcome{o}, "Back": "/holds"})
}

func atoi(s string, def int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
		return n
	}
	return def
}
