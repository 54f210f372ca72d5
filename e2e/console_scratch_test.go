package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	kstore "github.com/craig/retention/kernel/store"
)

// consoleSealedCase is a demo case (closed, in security's audit trail)
// the browser test seals.
const consoleSealedCase = "case:3"

// chromiumPath is Debian's chromium (.ci/run installs it); a missing
// browser fails the test under CI=true.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CRAIG_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium (Debian's package chromium; .ci/run installs it)")
	}
	t.Skip("no chromium: apt-get install chromium")
	return ""
}

// browser is a headless Chromium driven over the DevTools protocol.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	shot string // where screenshots go ("" none)
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	// The first call starts the browser for the context's life: no bound.
	require.NoError(t, chromedp.Do(ctx))
	b := &browser{t: t, ctx: ctx, base: base}
	if os.Getenv("CRAIG_CONSOLE_SCREENSHOTS") == "1" {
		b.shot = filepath.Join("..", "docs", "console")
	}
	return b
}

// run runs actions with a bound (a page that never loads fails the test).
func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
		b.t.Fatalf("%v at %s:\n%s", err, loc, body)
	}
}

// value runs one action and returns its value.
func value[T any](b *browser, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(b.t, err)
	return v
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return value(b, chromedp.Text(chromedp.CSS(sel)))
}

// screenshot saves the page for docs/console.md (CRAIG_CONSOLE_SCREENSHOTS=1).
func (b *browser) screenshot(name string) {
	b.t.Helper()
	if b.shot == "" {
		return
	}
	png := value(b, chromedp.FullScreenshot(80))
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shot, name+".jpg"), png, 0o644))
}

// signIn signs in at the loopback provider as role, from page path.
func (b *browser) signIn(path, role string) {
	b.t.Helper()
	b.run(chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS("#person-"+role)))
	b.screenshot("signin")
	b.run(chromedp.Click(chromedp.CSS("#person-"+role)), chromedp.WaitVisible(chromedp.CSS("#who")))
}

// labelled fails when a visible control has no label (every control is
// labelled and reachable by keyboard) or some text is below AA contrast.
func (b *browser) labelled() {
	b.t.Helper()
	unlabelled := value(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('input:not([type=hidden]), select, textarea'))
		.filter(e => !e.labels || e.labels.length === 0).map(e => e.name || e.id)`))
	require.Empty(b.t, unlabelled, "controls without a label on %s", b.base)
	// WCAG 2.1 AA contrast of every element with text of its own, against
	// the background it is drawn on: 4.5:1, 3:1 for large text.
	low := value(b, chromedp.Evaluate[[]string](contrastCheck))
	require.Empty(b.t, low, "text below WCAG 2.1 AA contrast")
}

// contrastCheck answers the elements whose text contrast is below AA.
const contrastCheck = `(() => {
	const lum = c => { const [r, g, b] = c.match(/[\d.]+/g).slice(0, 3).map(Number).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
	const bg = e => { for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor; const m = c.match(/[\d.]+/g); if (m && (m.length < 4 || Number(m[3]) > 0)) return c; } return 'rgb(255, 255, 255)'; };
	const low = [];
	for (const e of document.querySelectorAll('body *')) {
		if (![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
		const s = getComputedStyle(e);
		if (s.display === 'none' || s.visibility === 'hidden') continue;
		const a = lum(s.color), b = lum(bg(e));
		const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
		const size = parseFloat(s.fontSize), bold = Number(s.fontWeight) >= 700;
		if (ratio < ((size >= 24 || (bold && size >= 18.66)) ? 3 : 4.5)) low.push(e.tagName + ' ' + ratio.toFixed(2) + ': ' + e.textContent.trim().slice(0, 40));
	}
	return low;
})()`

// reflows checks the page at 200 % zoom (a 1280-pixel window at twice the
// scale: 640 CSS pixels wide): nothing is wider than the window (wide
// tables scroll in their own box).
func (b *browser) reflows(shot string) {
	b.t.Helper()
	b.run(chromedp.EmulateViewport(640, 450, chromedp.EmulateScale(2)))
	defer b.run(chromedp.EmulateReset())
	over := value(b, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth + 1`))
	require.False(b.t, over, "the page is wider than the window at 200 %% zoom")
	b.screenshot(shot)
}

// post submits a form the page did not offer (a forged or replayed post):
// fields as given, with or without the page's CSRF token.
func (b *browser) post(action string, fields map[string]string, withToken bool) {
	b.t.Helper()
	var js strings.Builder
	js.WriteString(`(() => { const f = document.createElement('form'); f.method = 'post'; f.action = ` + strconv.Quote(action) + `;`)
	add := func(k, v string) {
		js.WriteString(`{ const i = document.createElement('input'); i.type = 'hidden'; i.name = ` + strconv.Quote(k) + `; i.value = ` + strconv.Quote(v) + `; f.appendChild(i); }`)
	}
	for k, v := range fields {
		add(k, v)
	}
	if withToken {
		js.WriteString(`{ const i = document.createElement('input'); i.type = 'hidden'; i.name = 'csrf'; i.value = document.querySelector('input[name=csrf]').value; f.appendChild(i); }`)
	}
	js.WriteString(`document.body.appendChild(f); f.submit(); return true; })()`)
	_, err := chromedp.Call(b.ctx, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true})
	require.NoError(b.t, err)
	require.True(b.t, value(b, chromedp.Evaluate[bool](js.String())))
	b.run(chromedp.WaitVisible(chromedp.CSS("h1")))
}

// TestConsoleInABrowser drives the records console of `go tool mage
// demoUp` in headless Chromium, as a records officer and as counsel,
// against the demo's real serves of rules and security and its loopback
// identity provider.
func TestConsoleInABrowser(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	d := startDemo(t, root)
	base := d.state["CONSOLE_URL"]
	require.NotEmpty(t, base, "demoUp writes the console's address")
	require.Eventually(t, func() bool { return strings.Contains(d.out.String(), "The records console: "+base) },
		10*time.Second, 50*time.Millisecond, "demoUp prints the console's address")
	b := newBrowser(t, base)
	subject := "case:" + demoCase
	ctx := context.Background()

	// The officer signs in, sees the fleet, finds the case.
	b.signIn("/", "records-officer")
	require.Contains(t, b.text("h1"), "Fleet")
	require.Contains(t, b.text("main"), "rule_evaluations")
	require.Contains(t, b.text("main"), "audit_log")
	b.labelled()
	b.screenshot("fleet")
	b.run(chromedp.Navigate(base+"/case"), chromedp.SendKeys(chromedp.CSS("#subject"), subject), chromedp.Click(chromedp.CSS("#find")),
		chromedp.WaitVisible(chromedp.CSS("#place-hold")))
	b.labelled()
	b.screenshot("case")
	b.reflows("case-zoom-200")
	caseText := b.text("main")
	for _, svc := range []string{"rules", "security"} {
		require.Contains(t, caseText, "Download "+svc+"'s rows as NDJSON")
	}

	// A hold on the case: on the Holds page, and in the store's lock.
	b.run(chromedp.SendKeys(chromedp.CSS("#hold-title"), "Fair hearing 2026-88"), chromedp.SendKeys(chromedp.CSS("#hold-reason"), "subpoena 2026-114"),
		chromedp.Click(chromedp.CSS("#place-hold")), chromedp.WaitVisible(chromedp.CSS(".outcome")))
	require.Contains(t, b.text("main"), "placed")
	b.run(chromedp.Navigate(base+"/holds"), chromedp.WaitVisible(chromedp.CSS("#create-hold")))
	require.Contains(t, b.text("main"), "Fair hearing 2026-88")
	b.labelled()
	b.screenshot("holds")
	requireStoreHeld(t, d, "security")

	// A form posted without its CSRF token is refused and changes nothing.
	holdsBefore := countRows(t, d, "security", "archive_holds")
	b.post("/holds", map[string]string{"service": "security", "title": "forged", "reason": "forged", "subjects": subject}, false)
	require.Contains(t, b.text("main"), "This form was refused")
	require.Equal(t, holdsBefore, countRows(t, d, "security", "archive_holds"), "a refused form changes nothing")

	// An expungement while the hold keeps the case is refused in words.
	b.run(chromedp.Navigate(base+"/case?subject="+subject), chromedp.WaitVisible(chromedp.CSS("#request-expungement")),
		chromedp.SendKeys(chromedp.CSS("#exp-order"), "Order 2026-FC-17"), chromedp.SendKeys(chromedp.CSS("#exp-reason"), "court order"),
		chromedp.Click(chromedp.CSS("#request-expungement")), chromedp.WaitVisible(chromedp.CSS("#back")))
	refused := b.text("main")
	require.Contains(t, refused, "A legal hold keeps records of this case")
	require.NotContains(t, refused, `"error"`, "never raw JSON")
	b.screenshot("refused")

	// Release the holds, then request the expungement.
	for range 2 {
		b.run(chromedp.Navigate(base+"/holds"), chromedp.WaitVisible(chromedp.CSS("#create-hold")),
			chromedp.SendKeys(chromedp.CSS(`form[action="/holds/release"] input[name=reason]`), "hearing closed"),
			chromedp.Submit(chromedp.CSS(`form[action="/holds/release"] input[name=reason]`)), chromedp.WaitVisible(chromedp.CSS("#back")))
		require.Contains(t, b.text("main"), "released")
	}
	b.run(chromedp.Navigate(base+"/case?subject="+subject), chromedp.WaitVisible(chromedp.CSS("#request-expungement")),
		chromedp.SendKeys(chromedp.CSS("#exp-order"), "Order 2026-FC-17"), chromedp.SendKeys(chromedp.CSS("#exp-reason"), "court order"),
		chromedp.Click(chromedp.CSS("#request-expungement")), chromedp.WaitVisible(chromedp.CSS("#back")))
	require.Contains(t, b.text("main"), "Nothing is removed until a second person approves it")

	// The requester sees "waiting for a second person"; a forged approval
	// of their own is refused by the service, in words.
	b.run(chromedp.Navigate(base+"/approvals"), chromedp.WaitVisible(chromedp.CSS("h1")))
	require.Contains(t, b.text("main"), "Waiting for a second person")
	b.screenshot("approvals-requester")
	expID := pendingExpungement(t, d, "security")
	b.post("/approvals/approve", map[string]string{"service": "security", "kind": "expungement", "id": expID, "confirm": expID[:8]}, true)
	require.Contains(t, b.text("main"), "You cannot approve your own request")
	require.Equal(t, expID, pendingExpungement(t, d, "security"), "still awaiting approval")

	// Seal another case: without the sealed-read role it reads as unknown.
	b.run(chromedp.Navigate(base+"/case?subject="+consoleSealedCase), chromedp.WaitVisible(chromedp.CSS("#seal")),
		chromedp.SendKeys(chromedp.CSS("#seal-order"), "Seal 2026-JV-3"), chromedp.SendKeys(chromedp.CSS("#seal-reason"), "juvenile court"),
		chromedp.Click(chromedp.CSS("#seal")), chromedp.WaitVisible(chromedp.CSS("#back")))
	require.Contains(t, b.text("main"), "sealed under order Seal 2026-JV-3")
	b.run(chromedp.Navigate(base+"/case?subject="+consoleSealedCase), chromedp.WaitVisible(chromedp.CSS("#unknown")))
	b.screenshot("case-sealed")

	// Counsel signs in, sees exactly the archives and their rows, approves.
	b.run(chromedp.Click(chromedp.CSS("#sign-out")), chromedp.WaitVisible(chromedp.CSS("#sign-in")))
	b.screenshot("signed-out")
	b.signIn("/approvals", "counsel")
	approvals := b.text("main")
	for _, a := range expungementArchives(t, d, "security", expID) {
		require.Contains(t, approvals, a.id)
		require.Contains(t, approvals, strconv.Itoa(a.records))
	}
	b.labelled()
	b.screenshot("approvals")
	b.reflows("approvals-zoom-200")
	b.run(chromedp.SendKeys(chromedp.CSS(confirmSel("security", expID)), "wrong"), chromedp.Submit(chromedp.CSS(confirmSel("security", expID))), chromedp.WaitVisible(chromedp.CSS("#problem")))
	require.Contains(t, b.text("main"), "The confirmation did not match")
	require.Equal(t, expID, pendingExpungement(t, d, "security"))
	b.run(chromedp.Navigate(base+"/approvals"), chromedp.WaitVisible(chromedp.CSS(confirmSel("security", expID))),
		chromedp.SendKeys(chromedp.CSS(confirmSel("security", expID)), expID[:8]), chromedp.Submit(chromedp.CSS(confirmSel("security", expID))), chromedp.WaitVisible(chromedp.CSS("#back")))
	require.Contains(t, b.text("main"), "executed:")
	b.screenshot("approved")

	// A purge requested by craigctl's operator on rules (dual control):
	// counsel sees the archive and approves it here.
	purgeID := consolePurge(t, b, d)

	// With the role and the order, counsel reads the sealed case.
	b.run(chromedp.Navigate(base+"/case?subject="+consoleSealedCase+"&order_ref=Seal+2026-JV-3"), chromedp.WaitVisible(chromedp.CSS("h1")))
	require.NotContains(t, b.text("main"), "is known to any service")

	// The certificate is listed, verifies against the store, downloads as stored.
	b.run(chromedp.Navigate(base+"/certificates/view?service=rules&kind=purge&id="+purgeID), chromedp.WaitVisible(chromedp.CSS("#verified")))
	require.Contains(t, b.text("#verified"), "none of the 1 archive(s) it destroyed has any version left")
	b.run(chromedp.Navigate(base+"/certificates"), chromedp.WaitVisible(chromedp.CSS(".certificate")))
	b.screenshot("certificates")
	b.run(chromedp.Click(chromedp.CSS(`.certificate a`)), chromedp.WaitVisible(chromedp.CSS("#verified")))
	b.screenshot("certificate")
	shown := b.text("main")
	href := value(b, chromedp.AttributeValue(chromedp.CSS("#download"), "href"))
	require.True(t, href.Exists)
	body := b.download(href.Value)
	sum := sha256.Sum256(body)
	require.Contains(t, shown, hex.EncodeToString(sum[:]), "the download is the certificate as stored")

	// The records schedule: proposed by craigctl's operator, approved by
	// counsel here; five cases closed six years ago fall due on security;
	// counsel prepares a batch, the officer approves it, its certificate
	// verifies.
	version := consoleDisposition(t, b, d, root)

	// A service stopped mid-session is named; the rest of the page works.
	pid, err := strconv.Atoi(d.state["SECURITY_PID"])
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	waitGone(t, pid)
	b.run(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("h1")))
	fleet := b.text("main")
	require.Contains(t, fleet, "security does not answer")
	require.Contains(t, fleet, "rule_evaluations", "rules still shown")
	require.Contains(t, fleet, version, "the schedule in force")
	b.screenshot("service-down")
	_ = ctx
}

// download fetches a console link with the browser's session cookie.
func (b *browser) download(href string) []byte {
	b.t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{})
	require.NoError(b.t, err)
	cookies := res.Cookies
	req, err := http.NewRequest(http.MethodGet, b.base+href, nil)
	require.NoError(b.t, err)
	for _, c := range cookies {
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(b.t, http.StatusOK, resp.StatusCode)
	require.Contains(b.t, resp.Header.Get("Content-Disposition"), "attachment")
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return raw
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if out, _ := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output(); strings.HasPrefix(strings.TrimSpace(string(out)), "Z") {
			return
		}
		require.True(t, time.Now().Before(deadline), "serve %d did not stop", pid)
		time.Sleep(100 * time.Millisecond)
	}
}

func demoConn(t *testing.T, d *runbookDemo, service string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), d.dbURL(t, service))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func countRows(t *testing.T, d *runbookDemo, service, table string) int {
	t.Helper()
	var n int
	require.NoError(t, demoConn(t, d, service).QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n))
	return n
}

func pendingExpungement(t *testing.T, d *runbookDemo, service string) string {
	t.Helper()
	var id string
	require.NoError(t, demoConn(t, d, service).QueryRow(context.Background(),
		`SELECT expunge_id::text FROM expungements WHERE status = 'awaiting_approval'`).Scan(&id))
	return id
}

type ledgerCount struct {
	id      string
	records int
}

func expungementArchives(t *testing.T, d *runbookDemo, service, id string) []ledgerCount {
	t.Helper()
	rows, err := demoConn(t, d, service).Query(context.Background(), `SELECT l.archive_id::text, l.record_count FROM expungements e
		JOIN archive_ledger l ON l.archive_id = ANY (e.archives) WHERE e.expunge_id = $1`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledgerCount, error) {
		var l ledgerCount
		return l, r.Scan(&l.id, &l.records)
	})
	require.NoError(t, err)
	require.NotEmpty(t, out, "the order names the archives that hold the case")
	return out
}

// requireStoreHeld: an archive of the case on service carries the store's
// legal hold (S3 Object Lock) after the console's hold.
func requireStoreHeld(t *testing.T, d *runbookDemo, service string) {
	t.Helper()
	ctx := context.Background()
	var key string
	require.NoError(t, demoConn(t, d, service).QueryRow(ctx,
		`SELECT data_key FROM archive_ledger WHERE legal_hold AND purged_at IS NULL ORDER BY archived_at LIMIT 1`).Scan(&key))
	st, err := kstore.Open(ctx, d.in.StoreURL)
	require.NoError(t, err)
	defer func() { _ = st.Close() }()
	held, err := st.LegalHold(ctx, key)
	require.NoError(t, err)
	require.True(t, held, "the store's lock holds %s", key)
}

// confirmSel is the typed confirmation's field of a request on a service.
func confirmSel(service, id string) string { return `[id="confirm-` + service + "-" + id + `"]` }

// callAs calls a demo serve's API with a token of the demo's operators.
func callAs(t *testing.T, base, token, method, path, body string, want int) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, raw)
}

func consoleDisposition(t *testing.T, b *browser, d *runbookDemo, root string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "deploy", "records-schedule", "example.yaml"))
	require.NoError(t, err) // its version, approved below
	var version string
	for _, line := range strings.Split(string(doc), "\n") {
		if v, ok := strings.CutPrefix(line, "version:"); ok {
			version = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	require.NotEmpty(t, version)
	op := d.state["CRAIG_TOKEN"]
	closed := time.Now().UTC().AddDate(-6, 0, 0).Format(time.RFC3339)
	schedule := filepath.Join(root, "deploy", "records-schedule", "example.yaml")
	ctl{t: t, env: d.state}.ok("schedule", "propose", schedule, "--fleet", d.state["FLEET_FILE"])
	for _, svc := range []string{"rules", "security"} {
		base := d.state["CRAIG_"+strings.ToUpper(svc)+"_URL"]
		for c := 1; c <= 5; c++ {
			callAs(t, base, op, http.MethodPost, "/admin/subjects/case:"+strconv.Itoa(c)+"/events",
				`{"type": "case.closed", "at": "`+closed+`", "classification": "Unsubstantiated"}`, http.StatusOK)
		}
	}
	code := strings.ToLower(version[:min(8, len(version))])
	for _, svc := range []string{"rules", "security"} {
		b.run(chromedp.Navigate(b.base+"/approvals"), chromedp.WaitVisible(chromedp.CSS(confirmSel(svc, version))),
			chromedp.SendKeys(chromedp.CSS(confirmSel(svc, version)), code), chromedp.Submit(chromedp.CSS(confirmSel(svc, version))),
			chromedp.WaitVisible(chromedp.CSS("#back")))
		require.Contains(t, b.text("main"), "in force: "+version)
	}
	b.run(chromedp.Navigate(b.base+"/dispositions"), chromedp.WaitVisible(chromedp.CSS("#freeze-security")))
	due := b.text("main")
	require.Contains(t, due, "Authority:")
	require.Contains(t, due, "case:1")
	b.labelled()
	b.screenshot("dispositions")
	b.run(chromedp.Click(chromedp.CSS("#freeze-security")), chromedp.WaitVisible(chromedp.CSS("#back")))
	require.Contains(t, b.text("main"), "prepared")
	var batch string
	require.NoError(t, demoConn(t, d, "security").QueryRow(context.Background(),
		`SELECT disposition_id::text FROM dispositions WHERE status = 'proposed'`).Scan(&batch))
	b.run(chromedp.Navigate(b.base+"/approvals"), chromedp.WaitVisible(chromedp.CSS("h1")))
	require.Contains(t, b.text("main"), "Waiting for a second person", "counsel prepared the batch")
	b.run(chromedp.Click(chromedp.CSS("#sign-out")), chromedp.WaitVisible(chromedp.CSS("#sign-in")))
	b.signIn("/approvals", "records-officer")
	b.screenshot("approvals-disposition")
	b.run(chromedp.SendKeys(chromedp.CSS(confirmSel("security", batch)), batch[:8]), chromedp.Submit(chromedp.CSS(confirmSel("security", batch))),
		chromedp.WaitVisible(chromedp.CSS("#back")))
	require.Contains(t, b.text("main"), "executed:")
	var status string
	require.NoError(t, demoConn(t, d, "security").QueryRow(context.Background(),
		`SELECT status FROM dispositions WHERE disposition_id = $1`, batch).Scan(&status))
	require.Equal(t, "executed", status)
	b.run(chromedp.Navigate(b.base+"/certificates/view?service=security&kind=disposition&id="+batch), chromedp.WaitVisible(chromedp.CSS("#verified")))
	require.NotContains(t, b.text("pre"), "case:1", "a certificate names no case")
	return version
}

// consolePurge has craigctl's operator date one rules archive yesterday
// and request its purge (rules needs a second person); counsel, signed
// in, sees it on the Approvals page and approves it. It answers the
// purge's id.
func consolePurge(t *testing.T, b *browser, d *runbookDemo) string {
	t.Helper()
	ctx := context.Background()
	conn := demoConn(t, d, "rules")
	var archive string
	var records int
	require.NoError(t, conn.QueryRow(ctx, `SELECT archive_id::text, record_count FROM archive_ledger
		WHERE purged_at IS NULL AND NOT legal_hold ORDER BY archived_at, archive_id LIMIT 1`).Scan(&archive, &records))
	base, op := d.state["CRAIG_RULES_URL"], d.state["CRAIG_TOKEN"]
	yesterday := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	callAs(t, base, op, http.MethodPut, "/admin/archive/records/"+archive+"/retention", `{"retention_until": "`+yesterday+`"}`, http.StatusOK)
	callAs(t, base, op, http.MethodPost, "/admin/archive/purge", `{"archive_ids": ["`+archive+`"]}`, http.StatusOK)
	var purgeID string
	require.NoError(t, conn.QueryRow(ctx, `SELECT purge_id::text FROM purges WHERE status = 'awaiting_approval'`).Scan(&purgeID))
	b.run(chromedp.Navigate(b.base+"/approvals"), chromedp.WaitVisible(chromedp.CSS(confirmSel("rules", purgeID))))
	page := b.text("main")
	require.Contains(t, page, archive)
	require.Contains(t, page, strconv.Itoa(records))
	b.run(chromedp.SendKeys(chromedp.CSS(confirmSel("rules", purgeID)), purgeID[:8]), chromedp.Submit(chromedp.CSS(confirmSel("rules", purgeID))),
		chromedp.WaitVisible(chromedp.CSS("#back")))
	require.Contains(t, b.text("main"), "executed")
	var purged bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT purged_at IS NOT NULL FROM archive_ledger WHERE archive_id = $1`, archive).Scan(&purged))
	require.True(t, purged, "the approved purge destroyed the archive")
	return purgeID
}
