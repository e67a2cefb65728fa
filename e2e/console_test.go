package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// chromium finds Debian's headless-capable Chromium.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (apt-get install -y chromium): the console's browser tests cannot run here; .ci/run installs it, so they run in CI")
	return ""
}

// browser starts a headless Chromium with a fresh profile and no network
// beyond what the test serves.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser now
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// tab drives one browser context (its own cookies) against the console.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	shot string // directory for screenshots
}

func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

func run[T any](b *tab, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %v", err)
	}
	return v
}

// read runs a read-only action (a query of the page), once more if the
// page was replaced under it: Chromium answers "Inspected target
// navigated or closed" when a navigation lands between two calls, which
// a second look, after the new page loaded, does not mind.
func read[T any](b *tab, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil && navigating(err) {
		b.t.Logf("browser: %v; reading again once the page has loaded", err)
		if err = chromedp.Do(ctx, chromedp.WaitReady("body")); err == nil {
			v, err = chromedp.Run(ctx, a)
		}
	}
	if err != nil {
		b.t.Fatalf("browser: %v", err)
	}
	return v
}

// probe runs a query while a navigation may be under way, as the loops
// that wait for a page to be replaced do. A query that lands between the
// old page and the new one (Chromium answers "Inspected target navigated
// or closed", or finds no execution context) gives the zero value, which
// those loops read as "not there yet"; any other error ends the test.
func probe[T any](b *tab, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil && navigating(err) {
		var zero T
		return zero
	}
	if err != nil {
		b.t.Fatalf("browser: %v", err)
	}
	return v
}

// navigating reports whether err says the page went away under a query.
func navigating(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "navigated or closed") || strings.Contains(msg, "Cannot find context with specified id") || strings.Contains(msg, "Execution context was destroyed")
}

func (b *tab) open(path string) { b.t.Helper(); b.do(chromedp.Navigate(b.base + path)) }

func (b *tab) text(sel string) string {
	b.t.Helper()
	return read(b, chromedp.Text(chromedp.CSS(sel)))
}

// waitFor reloads path until the text of sel contains want.
func (b *tab) waitFor(path, sel, want string) {
	b.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b.open(path)
		got := run(b, chromedp.Evaluate[string]("(document.querySelector("+jsString(sel)+")||{}).innerText||''"))
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: %s shows %q, not %q, after 60s", path, sel, got, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (b *tab) signIn(key string) {
	b.t.Helper()
	b.open("/login")
	b.do(chromedp.SendKeys(chromedp.ID("key"), key))
	b.submit("signin")
}

// submit clicks the button with id and waits for the page it leads to.
func (b *tab) submit(id string) {
	b.t.Helper()
	run(b, chromedp.Evaluate[bool](`window.sluiceLeaving = true`))
	b.do(chromedp.Click(chromedp.ID(id)))
	deadline := time.Now().Add(30 * time.Second)
	for !probe(b, chromedp.Evaluate[bool](`!window.sluiceLeaving && document.readyState === 'complete'`)) {
		if time.Now().After(deadline) {
			b.t.Fatalf("clicking #%s led nowhere within 30s", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// post submits a form built in the page (as a forged or scripted request
// would be sent; the console's CSP allows no fetch) and returns the
// answer's status and text.
func (b *tab) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	var fields []string
	for k, vs := range form {
		for _, v := range vs {
			fields = append(fields, "["+jsString(k)+","+jsString(v)+"]")
		}
	}
	js := `(() => { const f = document.createElement('form'); f.method = 'post'; f.action = ` + jsString(path) + `;
	for (const [k, v] of [` + strings.Join(fields, ",") + `]) { const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }
	window.sluicePosted = true; document.body.appendChild(f); f.submit(); return true; })()`
	probe(b, chromedp.Evaluate[bool](js)) // the answer may race the navigation the submit starts
	deadline := time.Now().Add(30 * time.Second)
	for {
		res := probe(b, chromedp.Evaluate[struct {
			Status int
			Path   string
			Body   string
		}](`({Status: window.sluicePosted || document.readyState !== 'complete' ? 0 : (performance.getEntriesByType('navigation')[0] || {}).responseStatus || 0,
			Path: location.pathname, Body: document.body ? document.body.innerText : ''})`))
		if res.Path == path && res.Status != 0 {
			return res.Status, res.Body
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("POST %s: no answer within 30s (at %s)", path, res.Path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *tab) screenshot(name string) {
	b.t.Helper()
	png := run(b, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// printedJobs follows a `sluicectl worker --json`'s stdout.
type printedJobs struct {
	mu   sync.Mutex
	jobs []map[string]any
}

func startPrintingWorker(t *testing.T, args ...string) (*proc, *printedJobs, string) {
	t.Helper()
	p, pj := runSluicectlWorker(t, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	return p, pj, p.addr("worker listening")
}

// runSluicectlWorker runs `sluicectl worker --json` with args and follows
// the jobs it prints.
func runSluicectlWorker(t *testing.T, args ...string) (*proc, *printedJobs) {
	t.Helper()
	stdout, out := io.Pipe()
	pj := &printedJobs{}
	p := startSpec(t, testcluster.Spec{
		Name: "sluicectl worker", Path: filepath.Join(env.Bin, "sluicectl"), Args: append([]string{"worker", "--json"}, args...),
		Setup: func(cmd *exec.Cmd) { cmd.Stdout = out },
	})
	t.Cleanup(func() { _ = out.Close() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				pj.mu.Lock()
				pj.jobs = append(pj.jobs, m)
				pj.mu.Unlock()
			}
		}
	}()
	return p, pj
}

func (pj *printedJobs) outcome(id string) []string {
	pj.mu.Lock()
	defer pj.mu.Unlock()
	var out []string
	for _, j := range pj.jobs {
		if j["job_id"] == id {
			out = append(out, j["outcome"].(string))
		}
	}
	return out
}

// TestConsoleInBrowser drives the web console in headless Chromium
// against the real gateway: sign-in, a job counted, a poison job in the
// DLQ with its reason and its <script> payload inert, a replay from the
// page with a dry run first and the job delivered, a read-only key that
// cannot replay, and an action without the CSRF token refused. With
// SLUICE_CONSOLE_SCREENSHOTS=dir it saves a screenshot of each page there
// (docs/console holds the committed ones).
func TestConsoleInBrowser(t *testing.T) {
	ctx := browser(t)
	shots := os.Getenv("SLUICE_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	dir := t.TempDir()
	const adminKey = "e2e-console-admin-key-1"
	roFile := writeFile(t, dir, "ro-key", "e2e-console-readonly-key-1\n")
	worker, _, workerAddr := startPrintingWorker(t, "--listen", "127.0.0.1:0", "--fail", "poison")
	gw := start(t, "gateway", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", dir,
		"--admin-key", adminKey, "--console-readonly-key-file", roFile, "--console-sample-interval", "1s",
		"--worker-addr", workerAddr, "--max-attempts", "2", "--retry-base", "100ms", "--retry-cap", "100ms")
	addr := gw.addr("gateway listening")
	consoleURL := strings.TrimSuffix(gw.waitLog("web console listening")["url"].(string), "/")
	devKey := strings.TrimSpace(readFile(t, filepath.Join(dir, "dev-api-key")))
	submit := func(payload string, extra ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(env.Bin, "sluicectl"), append([]string{"submit", "--addr", addr, "--key", devKey, payload}, extra...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("submit: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	admin := &tab{t: t, ctx: ctx, base: consoleURL, shot: shots}

	// Sign in: a tenant key is refused, the admin key lands on the overview.
	admin.open("/")
	if loc := run(admin, chromedp.Location()); !strings.Contains(loc, "/login") {
		t.Fatalf("not signed in, / shows %s, want the sign-in page", loc)
	}
	admin.screenshot("login")
	admin.signIn(devKey)
	if got := admin.text("#error"); !strings.Contains(got, "tenant keys are refused") {
		t.Errorf("sign-in with a tenant key says %q", got)
	}
	admin.signIn(adminKey)
	if got := admin.text("h1"); got != "Overview" {
		t.Fatalf("signed in with the admin key, the page is %q, want the overview", got)
	}

	// A submitted job is counted (delayed, so it stays put).
	submit("later", "--delay", "15m")
	admin.waitFor("/", "#lane-standard .delayed", "1")

	// A poison job reaches the DLQ with its reason, and its payload is
	// shown as text: no script runs, no element is injected.
	poisonPayload := `poison <script>document.title="pwned"</script><img src=x onerror="document.title='pwned'">`
	poison := submit(poisonPayload, "--attr", `note=<b onmouseover="alert(1)">hi</b>`)
	admin.waitFor("/dlq", "#dlq", poison)
	if got := admin.text("#dlq td.reason"); got != "permanent_failure" {
		t.Errorf("DLQ reason column %q, want permanent_failure", got)
	}
	if got := run(admin, chromedp.Evaluate[string]("document.querySelector('#dlq td.lasterror').title")); !strings.Contains(got, `payload matches --fail "poison"`) {
		t.Errorf("DLQ last error %q", got)
	}
	if got := admin.text("#dlq code.payload"); !strings.Contains(got, `<script>document.title="pwned"</script>`) {
		t.Errorf("payload preview %q: want the payload shown as text", got)
	}
	inert := func() {
		t.Helper()
		n := run(admin, chromedp.Evaluate[int]("document.querySelectorAll('script, img, b[onmouseover]').length"))
		title := run(admin, chromedp.Title())
		if n != 0 || strings.Contains(title, "pwned") {
			t.Errorf("injected markup is live: %d script/img/b elements, title %q", n, title)
		}
	}
	inert()
	admin.screenshot("dlq")
	admin.open("/dlq/job?id=" + url.QueryEscape(poison))
	if got := admin.text("#payload"); got != poisonPayload {
		t.Errorf("job page payload %q, want %q", got, poisonPayload)
	}
	inert()
	admin.screenshot("job")
	admin.open("/tenants?tenant=dev")
	if got := admin.text("#limits"); !strings.Contains(got, "tier standard") || !strings.Contains(got, "built-in development config") {
		t.Errorf("tenant limits: %q", got)
	}

	// An action without the CSRF token, or with a wrong one, is refused.
	for _, token := range []string{"", "not-the-token"} {
		form := url.Values{"tenant": {"dev"}, "confirm": {"1"}}
		if token != "" {
			form.Set("csrf", token)
		}
		admin.open("/dlq")
		if code, body := admin.post("/replays", form); code != 403 || !strings.Contains(body, "CSRF token is missing or wrong") {
			t.Errorf("replay with CSRF token %q: %d %q, want 403", token, code, body)
		}
	}

	// The read-only key can look and dry-run, not replay.
	roCtx, cancelRO := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	defer cancelRO()
	if err := chromedp.Do(roCtx); err != nil { // open its tab for the test's whole run
		t.Fatal(err)
	}
	ro := &tab{t: t, ctx: roCtx, base: consoleURL, shot: shots}
	ro.signIn("e2e-console-readonly-key-1")
	if got := ro.text(".role"); got != "read-only key" {
		t.Errorf("signed in with the read-only key, the page says %q", got)
	}
	ro.open("/dlq")
	ro.do(chromedp.SendKeys(chromedp.CSS("form.replay input[name=tenant]"), "dev"))
	ro.submit("dry-run")
	if got := ro.text("#dry"); !strings.Contains(got, "1 of 1 dead-lettered jobs would be replayed") || !strings.Contains(got, "read-only key") {
		t.Errorf("read-only dry run: %q", got)
	}
	if n := read(ro, chromedp.Evaluate[int]("document.querySelectorAll('#confirm').length")); n != 0 {
		t.Error("the read-only key is offered the replay button")
	}
	csrf := read(ro, chromedp.Evaluate[string]("document.querySelector('input[name=csrf]').value"))
	if code, body := ro.post("/replays", url.Values{"csrf": {csrf}, "tenant": {"dev"}, "confirm": {"1"}}); code != 403 || !strings.Contains(body, "read-only key cannot replay") {
		t.Errorf("read-only replay: %d %q, want 403", code, body)
	}

	// Fix the worker, replay from the page with a dry run first, and
	// watch the job delivered.
	if err := worker.stop(syscall.SIGINT); err != nil {
		t.Fatalf("stop worker: %v", err)
	}
	_, jobs, _ := startPrintingWorker(t, "--listen", workerAddr)
	admin.open("/dlq")
	admin.do(chromedp.SendKeys(chromedp.CSS("form.replay input[name=tenant]"), "dev"))
	admin.submit("dry-run")
	if got := admin.text("#dry"); !strings.Contains(got, "1 of 1 dead-lettered jobs would be replayed") {
		t.Fatalf("dry run: %q", got)
	}
	admin.screenshot("dry-run")
	admin.submit("confirm")
	loc := run(admin, chromedp.Location())
	path := strings.TrimPrefix(loc, consoleURL)
	admin.waitFor(path, "#state", "done")
	if got := admin.text("#moved"); got != "1" {
		t.Errorf("replay moved %q jobs, want 1", got)
	}
	admin.screenshot("replay")
	eventually(t, 60*time.Second, 50*time.Millisecond, func() bool { return strings.Contains(strings.Join(jobs.outcome(poison), ","), "ok") },
		"replayed job %s not delivered within 60s", poison)
	admin.waitFor("/", "#lane-standard .dead", "0")
	admin.open("/replays")
	admin.screenshot("replays")
	for _, msg := range []string{"console: signed in", "console: replay", "console: action refused: missing or wrong CSRF token", "console: replay refused: read-only key"} {
		l := gw.waitLog(msg)
		if s, _ := json.Marshal(l); strings.Contains(string(s), adminKey) || strings.Contains(string(s), "e2e-console-readonly-key-1") {
			t.Errorf("log line %s carries a key", s)
		}
	}
	consoleFlood(t, ctx, shots)
}

// floodTenantsYAML has a flooding tenant with a low fair rate and weight
// 1, and a quiet one with the lane's weight and a guaranteed share.
const floodTenantsYAML = `
tenants:
  - id: flood
    tier: standard
    api_keys: [flood-key-1234]
    submit_rate: 10000
    submit_burst: 10000
    drain_rate: 2
    drain_burst: 2
    weight: 1
  - id: quiet
    tier: standard
    api_keys: [quiet-key-1234]
    submit_rate: 10000
    submit_burst: 10000
    min_share: 0.25
`

// consoleFlood floods a gateway with four delivery slots and a slow
// worker from one tenant, with a quieter one beside it: the Tenants page
// shows the flooding tenant with the larger share, past its fair rate,
// and its effective limits; the overview shows the lane's utilization
// and fairness, in the table and the charts.
func consoleFlood(t *testing.T, ctx context.Context, shots string) {
	dir := t.TempDir()
	const adminKey = "e2e-console-admin-key-2"
	// A slow worker, so the drainers' slots stay busy while a flood waits.
	slow := startWorker(t)
	slow.SetService(40 * time.Millisecond)
	gw := start(t, "gateway", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", dir,
		"--admin-key", adminKey, "--console-sample-interval", "1s", "--tenants", writeFile(t, dir, "tenants.yaml", floodTenantsYAML),
		"--worker-addr", slow.Addr, "--concurrency", "4", "--shutdown-grace", "2s")
	addr := gw.addr("gateway listening")
	consoleURL := strings.TrimSuffix(gw.waitLog("web console listening")["url"].(string), "/")
	admin := &tab{t: t, ctx: ctx, base: consoleURL, shot: shots}
	admin.signIn(adminKey)
	admin.waitFor("/", "#slots", "Delivery slots: 0 of 4 busy")

	c := client(t, addr)
	for tenant, n := range map[string]int{"flood": 800, "quiet": 300} {
		for sent := 0; sent < n; sent += 100 {
			batch := &ingestv1.SubmitBatchRequest{}
			for i := range 100 {
				batch.Jobs = append(batch.Jobs, &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "%s-%d", tenant, sent+i)})
			}
			resp, err := c.SubmitBatch(withKey(t.Context(), tenant+"-key-1234"), batch)
			if err != nil {
				t.Fatalf("flood as %s: %v", tenant, err)
			}
			for i, r := range resp.GetResults() {
				if r.GetError() != nil {
					t.Fatalf("flood as %s, job %d: %v", tenant, sent+i, r.GetError())
				}
			}
		}
	}

	// While it floods, the flooding tenant leads its lane, past its fair
	// rate (or sidelined), never "in share".
	type row struct{ Tenant, Share, Weight, State string }
	rows := func() map[string]row {
		out := map[string]row{}
		for _, r := range run(admin, chromedp.Evaluate[[]row](`[...document.querySelectorAll('#shares table.shares tbody tr')].map(tr => ({
			Tenant: tr.cells[0].innerText, Share: tr.cells[1].innerText, Weight: tr.cells[2].innerText, State: tr.cells[3].innerText}))`)) {
			out[r.Tenant] = r
		}
		return out
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		admin.open("/tenants?tenant=flood")
		r := rows()
		f, q := r["flood"], r["quiet"]
		if (f.State == "over rate" || f.State == "sidelined") && q.Share != "" && q.Share != "0%" {
			if f.Share == "0%" || f.Weight != "1" || q.Weight != "3" {
				t.Errorf("the Tenants page's rows: %+v, want the flooding tenant with a share and weight 1, the quiet one weight 3", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Tenants page never showed the flooding tenant past its fair rate beside the quiet one; last rows: %+v", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for sel, want := range map[string]string{
		"#fair-rate": "2 jobs/s, burst 2", "#weight": "1 (", "#min-share": "none",
		"#ceilings": "none beyond the drainers' concurrency", "#config": "tenants.yaml",
	} {
		if got := admin.text(sel); !strings.Contains(got, want) {
			t.Errorf("the flooding tenant's limits: %s is %q, want %q", sel, got, want)
		}
	}
	inert := run(admin, chromedp.Evaluate[int]("document.querySelectorAll('script').length"))
	if inert != 0 {
		t.Errorf("the Tenants page has %d scripts", inert)
	}
	admin.screenshot("tenants")

	// The overview shows the lane busy while the flood waited, with the
	// largest share; once the flood is delivered, its chart has drawn
	// the lane's utilization.
	admin.waitFor("/", "#lane-standard .util", "%")
	if got := admin.text("#lane-standard .deliveries"); got == "" || got == "0.0" || got == "—" {
		t.Errorf("overview deliveries per second %q after the flood, want a positive rate", got)
	}
	if got := admin.text("#lane-standard .top"); !strings.Contains(got, "flood") && !strings.Contains(got, "quiet") {
		t.Errorf("the standard lane's largest share is %q, want a tenant of the flood", got)
	}
	deadline = time.Now().Add(90 * time.Second)
	for {
		admin.open("/")
		waiting := admin.text("#lane-standard .waiting")
		lines := run(admin, chromedp.Evaluate[int]("document.querySelectorAll('#chart-standard polyline.s-util').length"))
		if waiting == "0" && lines > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview shows %s waiting in the standard lane and %d utilization lines after 90s, want 0 waiting and a line", waiting, lines)
		}
		time.Sleep(500 * time.Millisecond)
	}
	admin.screenshot("overview")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// consoleClient signs in to the console at base with key as a browser
// would (the sign-in form's CSRF token and cookie), with no browser.
func consoleClient(t *testing.T, base, key string) func(path string) string {
	t.Helper()
	return consoleClientOver(t, nil, base, key)
}

// consoleClientOver is consoleClient over rt (nil: the default
// transport), such as one that trusts the console's CA.
func consoleClientOver(t *testing.T, rt http.RoundTripper, base, key string) func(path string) string {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: rt, Jar: jar, Timeout: 30 * time.Second}
	get := func(path string) string {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
		}
		return string(b)
	}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(get("/login"))
	if m == nil {
		t.Fatal("the sign-in page has no CSRF token")
	}
	resp, err := c.PostForm(base+"/login", url.Values{"csrf": {m[1]}, "key": {key}, "next": {"/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/" {
		t.Fatalf("sign in: %s, at %s", resp.Status, resp.Request.URL)
	}
	return get
}
