package console

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/admin"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/admintest"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// servedConsole is a console over a real admin API on loopback, over an
// embedded store whose std lane's DLQ holds n jobs of tenant a.
func servedConsole(t *testing.T, n int) (*Console, *topotest.Bundle) {
	t.Helper()
	return servedConsoleOn(t, n, func(b queue.Backend) queue.Backend { return b })
}

// servedConsoleOn is servedConsole with the admin API over wrap's backend.
func servedConsoleOn(t *testing.T, n int, wrap func(queue.Backend) queue.Backend) (*Console, *topotest.Bundle) {
	t.Helper()
	tb := topotest.Setup(t, topotest.OneLane)
	for i := range n {
		tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.Envelope("a", "a-"+string(rune('a'+i)), time.Now().Add(-time.Hour)))
	}
	return consoleOf(t, admintest.Serve(t, wrap(tb.Backend), tb.Topo, "admin-key")), tb
}

// consoleOf is a console of the admin API at addr, which takes the key
// "admin-key".
func consoleOf(t *testing.T, addr string) *Console {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c, err := New(Config{Admin: adminv1.NewAdminServiceClient(conn), AdminKey: "admin-key", Logger: topotest.QuietLog})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// post sends form as s's POST to path and returns the response.
func post(t *testing.T, c *Console, s *session, path string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	form.Set("csrf", s.csrf)
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: s.id})
	w := httptest.NewRecorder()
	c.ServeHTTP(w, req)
	return w
}

// TestReplayFormRefusesNumbersItCannotRead: the replay form's "most jobs"
// and "jobs per second" fields were parsed with their errors dropped, so
// "1,000" or "10 jobs" became 0, which means every job (or the default
// rate): a confirmed replay meant to move a few moved the whole DLQ. Each
// must be refused, naming the field, and move nothing.
func TestReplayFormRefusesNumbersItCannotRead(t *testing.T) {
	t.Parallel()
	c, tb := servedConsole(t, 5)
	s := c.newSession(roleAdmin)
	for _, tc := range []struct {
		name, max, rate, field string
	}{
		{"max with a comma", "1,000", "", "most jobs"},
		{"max with a word", "2 jobs", "", "most jobs"},
		{"negative max", "-1", "", "most jobs"},
		{"rate with a unit", "", "5/s", "jobs per second"},
		{"rate not a number", "2", "fast", "jobs per second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, confirm := range []string{"", "1"} {
				form := url.Values{"tenant": {"a"}, "max": {tc.max}, "rate": {tc.rate}, "confirm": {confirm}}
				w := post(t, c, s, "/replays", form)
				if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tc.field) {
					t.Errorf("confirm=%q max=%q rate=%q: status %d, want 400 naming %q; body:\n%s", confirm, tc.max, tc.rate, w.Code, tc.field, w.Body.String())
				}
			}
			if st := tb.Stats(t, tb.Topo.DLQ("std")); st.Visible != 5 {
				t.Fatalf("the DLQ holds %d visible jobs after a refused form, want all 5", st.Visible)
			}
		})
	}
	// Blank fields are the defaults, and a good number still works.
	w := post(t, c, s, "/replays", url.Values{"tenant": {"a"}, "max": {" 2 "}, "rate": {"1000"}, "confirm": {"1"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("a well-formed replay: status %d; body:\n%s", w.Code, w.Body.String())
	}
	topotest.WaitFor(t, func() bool { return tb.Stats(t, tb.Topo.DLQ("std")).Visible == 3 })
}

// get sends s's GET of path and returns the response.
func get(t *testing.T, c *Console, s *session, path string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: s.id})
	w := httptest.NewRecorder()
	c.ServeHTTP(w, req)
	return w
}

// TestTenantsPageSurvivesAnUnlistableDLQ: the Tenants page counts dead
// letters from a DLQ listing, and any error of that listing (a replay
// holding the DLQ, a DLQ past the scan bound) replaced the whole page,
// shares and limits included, with the error. The page must render, with
// the reason in the dead-letter section.
func TestTenantsPageSurvivesAnUnlistableDLQ(t *testing.T) {
	t.Parallel()
	c, tb := servedConsole(t, 5)
	s := c.newSession(roleAdmin)
	// A slow replay holds the DLQ while it runs.
	if w := post(t, c, s, "/replays", url.Values{"tenant": {"a"}, "rate": {"0.5"}, "confirm": {"1"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("start replay: %d\n%s", w.Code, w.Body.String())
	}
	topotest.WaitFor(t, func() bool { return tb.Stats(t, tb.Topo.DLQ("std")).InFlight > 0 })
	w := get(t, c, s, "/tenants")
	body := w.Body.String()
	if w.Code != http.StatusOK || !strings.Contains(body, `id="shares"`) || !strings.Contains(body, `id="dead-note"`) || !strings.Contains(body, "sluicectl dlq cancel") {
		t.Fatalf("tenants page while a replay runs: status %d, want 200 with the shares and a note on the dead letters:\n%s", w.Code, body)
	}
	checkInert(t, w.Body.Bytes())
}

// unreadable is a backend whose receives all fail.
type unreadable struct{ queue.Backend }

func (unreadable) Receive(context.Context, *queue.ReceiveParams) ([]queue.Message, error) {
	return nil, fmt.Errorf("%w: throttled", queue.ErrUnavailable)
}

// TestFailedDryRunIsNotShownAsEmpty: a dry run that could not read the
// DLQ ends FAILED with Matched 0, and the console showed it as "Dry run:
// 0 of 0 dead-lettered jobs would be replayed" with status 200, so the
// operator saw nothing to replay. The page must say the dry run failed
// and why, with an error status, and offer no replay button.
func TestFailedDryRunIsNotShownAsEmpty(t *testing.T) {
	t.Parallel()
	c, _ := servedConsoleOn(t, 2, func(b queue.Backend) queue.Backend { return unreadable{b} })
	s := c.newSession(roleAdmin)
	w := post(t, c, s, "/replays", url.Values{"tenant": {"a"}})
	body := w.Body.String()
	if w.Code == http.StatusOK || strings.Contains(body, "would be replayed") || !strings.Contains(body, "throttled") || strings.Contains(body, `id="confirm"`) {
		t.Fatalf("dry run over an unreadable DLQ: status %d, want an error naming the failure and no replay button:\n%s", w.Code, body)
	}
	checkInert(t, w.Body.Bytes())
}

// TestReplayPageTotalIsWhatMatched: the replay page showed "0 of 1
// moved" for a replay that matched nothing, and "4 of 10" for one that
// moved all 4 it matched under a max of 10.
func TestReplayPageTotalIsWhatMatched(t *testing.T) {
	t.Parallel()
	c, _ := servedConsole(t, 4)
	s := c.newSession(roleAdmin)
	for _, tc := range []struct {
		tenant, max, want string
	}{
		{"b", "", "0 of 0 moved"},
		{"a", "10", "4 of 4 moved"},
	} {
		w := post(t, c, s, "/replays", url.Values{"tenant": {tc.tenant}, "max": {tc.max}, "rate": {"1000"}, "confirm": {"1"}})
		if w.Code != http.StatusSeeOther {
			t.Fatalf("start replay: %d\n%s", w.Code, w.Body.String())
		}
		page := w.Header().Get("Location")
		var body string
		topotest.WaitFor(t, func() bool {
			body = get(t, c, s, page).Body.String()
			return strings.Contains(body, `id="state">done`)
		})
		if !strings.Contains(body, tc.want) {
			t.Errorf("replay of tenant %s (max %q) done: want %q on the page:\n%s", tc.tenant, tc.max, tc.want, body)
		}
	}
}

// TestBulkyDeadLettersShow: dead letters with the payload and attributes
// the gateway allows made the 500-job listings of the job page and the
// Tenants page about 10 MB, which the console's gRPC client refused
// (RESOURCE_EXHAUSTED, over 4 MiB): no such job could be opened, and the
// Tenants page could not count dead letters. The pages render, and the
// count says how many it was taken over.
func TestBulkyDeadLettersShow(t *testing.T) {
	t.Parallel()
	c, tb := servedConsole(t, 0)
	tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.BulkyEnvelopes("a", 500)...)
	s := c.newSession(roleAdmin)

	w := get(t, c, s, "/dlq/job?id=a-499")
	if body := w.Body.String(); w.Code != http.StatusOK || !strings.Contains(body, "attr-15") {
		t.Errorf("job page of a bulky dead letter: status %d, want 200 with its attributes:\n%.3000s", w.Code, body)
	}
	w = get(t, c, s, "/tenants")
	body := w.Body.String()
	m := regexp.MustCompile(`<td>a</td><td class="n">(\d+)</td>`).FindStringSubmatch(body)
	if w.Code != http.StatusOK || m == nil || !strings.Contains(body, "Counted over the first "+m[1]+" dead letters") {
		t.Errorf("tenants page over bulky dead letters: status %d, want tenant a counted and the hint naming that count:\n%.3000s", w.Code, body)
	}
}

// TestConfirmedReplayUsesTheDryRunsTimes: "accepted within 1h" was turned
// into a time again when the dry run's Replay button was pressed, so the
// replay's range started later than the one the dry run showed and
// counted ("accepted since …"): jobs accepted at the start of that range,
// previewed, were left in the DLQ. The replay runs with the dry run's
// filter.
func TestConfirmedReplayUsesTheDryRunsTimes(t *testing.T) {
	t.Parallel()
	c, _ := servedConsole(t, 3)
	s := c.newSession(roleAdmin)
	w := post(t, c, s, "/replays", url.Values{"tenant": {"a"}, "since": {"2h"}, "rate": {"1000"}})
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `id="confirm"`) {
		t.Fatalf("dry run: status %d\n%s", w.Code, w.Body.String())
	}
	// Press the button: post the confirm form as the page has it.
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([a-z_]+)" value="([^"]*)">`).FindAllStringSubmatch(w.Body.String(), -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	if form.Get("confirm") != "1" {
		t.Fatalf("no confirm form on the dry run page:\n%s", w.Body.String())
	}
	w = post(t, c, s, "/replays", form)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("confirm: status %d\n%s", w.Code, w.Body.String())
	}
	resp, err := c.cfg.Admin.ListReplays(c.apiContext(t.Context()), &adminv1.ListReplaysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.GetReplays() // newest first
	if len(rs) != 2 || !rs[1].GetDryRun() {
		t.Fatalf("replays: %v", rs)
	}
	dry, replayed := rs[1].GetFilter().GetEnqueuedAfter().AsTime(), rs[0].GetFilter().GetEnqueuedAfter().AsTime()
	if !replayed.Equal(dry) {
		t.Errorf("the replay took jobs accepted since %s; its dry run, since %s", replayed.Format(time.RFC3339Nano), dry.Format(time.RFC3339Nano))
	}
}

// TestTenantsPageCountsMalformedApart: a DLQ message that is not an
// envelope has no tenant, and the Tenants page counted it under a tenant
// with no name, linked to a DLQ listing of every tenant's jobs. It is
// counted as malformed, linked to those only.
func TestTenantsPageCountsMalformedApart(t *testing.T) {
	t.Parallel()
	c, tb := servedConsole(t, 2)
	if _, err := tb.Backend.Send(t.Context(), &queue.SendParams{Queue: tb.Topo.DLQ("std"), Entries: []queue.SendEntry{{ID: "0", Body: []byte("junk")}}}); err != nil {
		t.Fatal(err)
	}
	s := c.newSession(roleAdmin)
	body := get(t, c, s, "/tenants").Body.String()
	if strings.Contains(body, "<td></td>") || strings.Contains(body, `href="/dlq?tenant="`) ||
		!strings.Contains(body, `<td>a</td><td class="n">2</td>`) || !strings.Contains(body, `id="dead-malformed"`) || !strings.Contains(body, `href="/dlq?reason=malformed_envelope"`) {
		t.Errorf("tenants page with a malformed dead letter: want tenant a's 2 and the malformed one apart, linked to the malformed ones:\n%s", body)
	}
}

// TestRefusedReplayKeepsTheListingAndTheForm: a refused replay form
// (jobs per second "abc", or no tenant) re-rendered the DLQ page with the
// error but no listing, so it said "No dead-lettered jobs match." over 7
// jobs, emptied "most jobs" and "jobs per second", and put the replay's
// tenant in the filter form. It shows the error, the jobs the filter
// lists, and both forms as the user left them.
func TestRefusedReplayKeepsTheListingAndTheForm(t *testing.T) {
	t.Parallel()
	c, tb := servedConsole(t, 7)
	s := c.newSession(roleAdmin)
	filters := regexp.MustCompile(`(?s)<form class="card filters".*?</form>`)
	replays := regexp.MustCompile(`(?s)<form class="card replay".*?</form>`)
	for _, tc := range []struct {
		name, tenant, max, rate, why string
	}{
		{"rate not a number", "a", "3", "abc", "jobs per second"},
		{"no tenant", "", "3", "50", "tenants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As the DLQ page unfiltered sends it: the filter's tenant
			// empty, the replay's typed in.
			form := url.Values{"filter_tenant": {""}, "lane": {""}, "reason": {""}, "since": {""}, "tenant": {tc.tenant}, "max": {tc.max}, "rate": {tc.rate}}
			w := post(t, c, s, "/replays", form)
			body := w.Body.String()
			if w.Code != http.StatusBadRequest || !strings.Contains(body, `id="error"`) || !strings.Contains(body, tc.why) {
				t.Fatalf("status %d, want 400 with an error naming %q:\n%s", w.Code, tc.why, body)
			}
			if n := strings.Count(body, `href="/dlq/job?id=`); n != 7 || strings.Contains(body, `id="dlq-empty"`) {
				t.Errorf("the refused form lists %d jobs (want all 7, as the filter does) or says none match:\n%s", n, body)
			}
			f, rf := filters.FindString(body), replays.FindString(body)
			if !strings.Contains(f, `name="tenant" value=""`) {
				t.Errorf("the filter form's tenant is not the filter's (empty):\n%s", f)
			}
			for _, want := range []string{`name="tenant" value="` + tc.tenant + `"`, `name="max" value="` + tc.max + `"`, `name="rate" value="` + tc.rate + `"`, `name="filter_tenant" value=""`} {
				if !strings.Contains(rf, want) {
					t.Errorf("the replay form lost what was typed: no %s in\n%s", want, rf)
				}
			}
			checkInert(t, w.Body.Bytes())
		})
	}
	// A filtered page keeps its filter's listing: tenant b has none.
	w := post(t, c, s, "/replays", url.Values{"filter_tenant": {"b"}, "tenant": {"a"}, "rate": {"abc"}})
	if body := w.Body.String(); !strings.Contains(body, `id="dlq-empty"`) || !strings.Contains(filters.FindString(body), `name="tenant" value="b"`) {
		t.Errorf("refused form over a filter of tenant b: want its empty listing and b in the filter form:\n%s", body)
	}
	if st := tb.Stats(t, tb.Topo.DLQ("std")); st.Visible != 7 {
		t.Fatalf("the DLQ holds %d visible jobs after refused forms, want all 7", st.Visible)
	}
}

// TestPayloadPreviewEscapesControlCharacters: a payload of "poison
// \x01\x02 binary\n" put bytes 0x01 and 0x02 raw into the DLQ and job
// pages, where sluicectl dlq list prints it Go-quoted. The pages show it
// as sluicectl does, printable text as it is, and a preview cut inside a
// character as text, not as an escaped broken character.
func TestPayloadPreviewEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	c, tb := servedConsole(t, 0)
	poison := topotest.Envelope("a", "a-poison", time.Now())
	poison.Payload = []byte("poison \x01\x02 binary\n")
	text := topotest.Envelope("a", "a-text", time.Now())
	text.Payload = []byte(`{"say": "<b>hi</b>"}`)
	long := topotest.Envelope("a", "a-long", time.Now())
	long.Payload = []byte("x" + strings.Repeat("é", 100)) // the 160-byte preview ends inside an é
	tb.Enqueue(t, tb.Topo.DLQ("std"), poison, text, long)
	s := c.newSession(roleAdmin)
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/dlq", []string{`&#34;poison \x01\x02 binary\n&#34;`, `{&#34;say&#34;: &#34;&lt;b&gt;hi&lt;/b&gt;&#34;}`, "x" + strings.Repeat("é", 79) + "</code>"}},
		{"/dlq/job?id=a-poison", []string{`&#34;poison \x01\x02 binary\n&#34;`}},
	} {
		w := get(t, c, s, tc.path)
		body := w.Body.String()
		if w.Code != http.StatusOK {
			t.Fatalf("%s: status %d\n%s", tc.path, w.Code, body)
		}
		if i := strings.IndexFunc(body, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r == utf8.RuneError }); i >= 0 {
			t.Errorf("%s: the page has %q raw at byte %d:\n%s", tc.path, body[i], i, body)
		}
		for _, want := range tc.want {
			if !strings.Contains(body, want) {
				t.Errorf("%s: want %s in the page:\n%s", tc.path, want, body)
			}
		}
		checkInert(t, w.Body.Bytes())
	}
}

// TestCappedDryRunSaysHowManyMatch: a dry run with "most jobs" 3 over 7
// matching jobs said "3 of 3 dead-lettered jobs would be replayed": it
// stops scanning at its third match. It says the cap and that at least 3
// match; without a cap it says how many of the DLQ's jobs match, leaving
// out (and naming apart) the malformed ones no replay can move.
func TestCappedDryRunSaysHowManyMatch(t *testing.T) {
	t.Parallel()
	c, tb := servedConsole(t, 7)
	if _, err := tb.Backend.Send(t.Context(), &queue.SendParams{Queue: tb.Topo.DLQ("std"), Entries: []queue.SendEntry{{ID: "0", Body: []byte("junk")}}}); err != nil {
		t.Fatal(err)
	}
	s := c.newSession(roleAdmin)
	dry := regexp.MustCompile(`(?s)<section class="card" id="dry">.*?</section>`)
	for _, tc := range []struct {
		name string
		form url.Values
		want []string
	}{
		{"capped", url.Values{"tenant": {"a"}, "max": {"3"}}, []string{
			"Dry run: 3 would be replayed (most jobs 3; at least 3 match: the dry run stopped at the cap, after scanning 3 dead-lettered jobs)", "Replay 3 jobs",
		}},
		{"under the cap", url.Values{"tenant": {"a"}, "max": {"10"}}, []string{"Dry run: 7 of 8 dead-lettered jobs would be replayed", "Replay 7 jobs"}},
		{"every tenant, one malformed", url.Values{"all_tenants": {"1"}}, []string{
			"Dry run: 7 of 8 dead-lettered jobs would be replayed", `id="malformed">1 more match but cannot be replayed`, "Replay 7 jobs",
		}},
	} {
		w := post(t, c, s, "/replays", tc.form)
		got := dry.FindString(w.Body.String())
		if w.Code != http.StatusOK {
			t.Fatalf("%s: status %d\n%s", tc.name, w.Code, w.Body.String())
		}
		for _, want := range tc.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s: want %q in the dry run:\n%s", tc.name, want, got)
			}
		}
	}
}

// TestOverviewLegendCoversNoSlots: with no pull worker connected the
// drainer has no delivery slots, and a lane whose jobs wait shows
// utilization "—", while the legend said "— where a lane's jobs did not
// wait". The legend names that case too.
func TestOverviewLegendCoversNoSlots(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	tb.Enqueue(t, tb.Topo.ShardQueue("std", 0), topotest.Envelope("a", "a-1", time.Now()), topotest.Envelope("a", "a-2", time.Now()))
	a := admin.NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	// What a drainer with no pull worker reports: no slots, and
	// utilization unknown (-1) although jobs wait.
	a.ServeFairness(func(int) *adminv1.GetFairnessResponse {
		return &adminv1.GetFairnessResponse{Lanes: []*adminv1.LaneFairness{{Lane: "std", Utilization: -1, JainIndex: -1}}}
	})
	c := consoleOf(t, admintest.ServeServer(t, a, "admin-key"))
	body := get(t, c, c.newSession(roleAdmin), "/").Body.String()
	if !regexp.MustCompile(`<td class="n waiting">2</td>`).MatchString(body) || !strings.Contains(body, `<td class="n util">—</td>`) {
		t.Fatalf("overview: want lane std with 2 waiting and utilization —:\n%s", body)
	}
	slots := regexp.MustCompile(`(?s)<p class="hint" id="slots">.*?</p>`).FindString(body)
	for _, want := range []string{"0 of 0 busy (no pull worker connected", "— where no delivery slot existed or the lane's jobs did not wait"} {
		if !strings.Contains(slots, want) {
			t.Errorf("the legend under the lanes has no %q:\n%s", want, slots)
		}
	}
}

// TestReplaysPageShowsRedrives: the Replays page lists each lane's
// whole-DLQ move tasks where the backend keeps them (SQS), with their
// progress and failure, and refreshes while one runs; on the embedded
// backend, which has none, the page is the replays alone, with no error.
// A redrive could be followed only from sluicectl (found in a
// walkthrough).
func TestReplaysPageShowsRedrives(t *testing.T) {
	t.Parallel()
	started := time.Now().Add(-time.Minute)
	tasks := []queue.RedriveTask{
		{Task: "handle-1", Status: queue.RedriveRunning, Moved: 40, ToMove: 120, MaxPerSecond: 10, Started: started},
		{Status: queue.RedriveFailed, Moved: 1, ToMove: 3, Started: started.Add(-time.Hour), FailureReason: "AccessDenied \x1b[2J"},
	}
	c, tb := servedConsoleOn(t, 0, func(b queue.Backend) queue.Backend { return &admintest.MoveTasks{Backend: b, Tasks: tasks} })
	page := get(t, c, c.newSession(roleReadOnly), "/replays").Body.String()
	for _, want := range []string{
		"Whole-DLQ redrives (SQS)", tb.Topo.DLQ("std"), `<span class="state running">running</span>`, `<progress max="120" value="40">`,
		"10/s", `<span class="state failed">failed</span>`, `&#34;AccessDenied \x1b[2J&#34;`, `http-equiv="refresh"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("replays page lacks %q:\n%s", want, page)
		}
	}

	c, _ = servedConsole(t, 0)
	page = get(t, c, c.newSession(roleReadOnly), "/replays").Body.String()
	if strings.Contains(page, "redrives") || strings.Contains(page, `class="error"`) || !strings.Contains(page, "No replays on this process yet") {
		t.Errorf("replays page on the embedded backend:\n%s\nwant the replays alone, no redrive section and no error", page)
	}
}
