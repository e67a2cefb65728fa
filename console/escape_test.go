package console

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

// pageTags are the elements the console's templates write; anything else
// in a page came from data that escaped escaping.
var pageTags = map[string]bool{
	"html": true, "head": true, "meta": true, "title": true, "link": true, "body": true, "header": true, "nav": true, "a": true,
	"form": true, "span": true, "input": true, "button": true, "main": true, "h1": true, "h2": true, "p": true, "table": true,
	"thead": true, "tbody": true, "tr": true, "th": true, "td": true, "code": true, "pre": true, "section": true, "label": true,
	"select": true, "option": true, "h3": true, "meter": true, "b": true, "figure": true, "figcaption": true, "details": true,
	"summary": true, "div": true, "svg": true, "line": true, "text": true, "polyline": true,
}

// checkInert fails if page has an element the templates do not write, an
// event-handler attribute, or a javascript: URL.
func checkInert(t *testing.T, page []byte) {
	t.Helper()
	z := html.NewTokenizer(bytes.NewReader(page))
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		tok := z.Token()
		if !pageTags[tok.Data] {
			t.Fatalf("page has a <%s> element the templates never write:\n%s", tok.Data, page)
		}
		for _, a := range tok.Attr {
			if strings.HasPrefix(a.Key, "on") || strings.HasPrefix(strings.TrimSpace(strings.ToLower(a.Val)), "javascript:") {
				t.Fatalf("page has attribute %s=%q:\n%s", a.Key, a.Val, page)
			}
		}
	}
}

// checkNoControls fails if page's text or attribute values hold a
// control character other than a newline, tab or carriage return: a
// worker's error or a panic's message can carry terminal escapes, and
// html/template passes them through.
func checkNoControls(t *testing.T, name string, page []byte) {
	t.Helper()
	bad := func(s string) bool {
		return strings.ContainsFunc(s, func(r rune) bool {
			return (r < ' ' && r != '\n' && r != '\t' && r != '\r') || r == 0x7f || (r >= 0x80 && r < 0xa0)
		})
	}
	z := html.NewTokenizer(bytes.NewReader(page))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return
		case html.TextToken:
			if text := string(z.Text()); bad(text) {
				t.Fatalf("%s page shows a control character in %q:\n%s", name, text, page)
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			for _, a := range z.Token().Attr {
				if bad(a.Val) {
					t.Fatalf("%s page has a control character in %s=%q:\n%s", name, a.Key, a.Val, page)
				}
			}
		}
	}
}

// FuzzPagesEscapeData renders the dead-letter, tenants and overview
// pages with arbitrary tenant ids, payloads, reasons, errors, attributes
// and fairness states: every one must come out as text.
func FuzzPagesEscapeData(f *testing.F) {
	f.Add("acme", []byte(`<script>alert(1)</script>`), "permanent_failure", `<img src=x onerror=alert(1)>`, "k", `"><svg onload=alert(1)>`)
	f.Add(`"><script>alert(1)</script>`, []byte("javascript:alert(1)"), "</td></tr></table><script>", "", "<b>", "</pre><iframe>")
	f.Add("t", []byte{0xff, 0x00, '<'}, "r", "\x00<\u2028>", "", "")
	f.Add("t", []byte("p"), "panic: \x1b[31mred", "exit \x1b[2J\r\n", "k\x07", "v\x9b")
	pages, err := parsePages()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tenant string, payload []byte, reason, lastErr, attrKey, attrVal string) {
		dl := &adminv1.DeadLetter{
			JobId: tenant + "-job", Tenant: tenant, Lane: "standard", Queue: "q", Reason: reason, LastError: lastErr,
			PayloadPreview: payload, PayloadBytes: int64(len(payload)) + 1, EnqueuedAt: timestamppb.Now(), Attributes: map[string]string{attrKey: attrVal},
		}
		tf := &adminv1.TenantFairness{Tenant: tenant, Share: 0.9, State: reason, Weight: 2}
		views := map[string]*view{
			"dlq": {Title: "Dead letters", Nav: "dlq", Role: "admin key", CSRF: "tok", Data: map[string]any{
				"F": filterForm{Tenant: tenant, Reason: reason}, "R": replayForm{Tenant: tenant, Max: attrKey, Rate: attrVal}, "Listed": true, "Lanes": []string{"standard", tenant}, "Jobs": []*adminv1.DeadLetter{dl}, "Next": "/dlq?page=" + tenant,
			}},
			"job": {Title: "Dead letter", Nav: "dlq", Role: "admin key", CSRF: "tok", Data: dl, Error: lastErr},
			"tenants": {Title: "Tenants", Nav: "tenants", Role: "read-only key", ReadOnly: true, Data: map[string]any{
				"Tenant": tenant, "Dead": []struct {
					Tenant string
					Count  int
				}{{tenant, 1}},
				"Drains": true, "Top": 20, "Fair": []*adminv1.LaneFairness{{Lane: "standard", Utilization: 0.5, JainIndex: -1, Tenants: []*adminv1.TenantFairness{tf}}},
				"Limits": &adminv1.GetTenantLimitsResponse{
					Tenant: tenant, Tier: reason, Limits: &adminv1.TenantLimits{Lane: attrKey, MaxDrainRate: 2, MaxInFlight: 3},
					Config: &adminv1.TenantConfigVersion{Path: attrVal, Sha256: lastErr},
				},
			}},
			"overview": {Title: "Overview", Nav: "overview", Role: "admin key", CSRF: "tok", Data: map[string]any{
				"Drains": true, "Lanes": []laneView{{laneStat: laneStat{Lane: "standard", Utilization: 1, Fairness: 0.5}, Top: tf}},
			}},
		}
		for name, v := range views {
			var buf bytes.Buffer
			if err := pages[name].Execute(&buf, v); err != nil {
				t.Fatalf("render %s: %v", name, err)
			}
			checkInert(t, buf.Bytes())
		}
		// A dead letter's own fields are shown Go-quoted when they hold
		// control characters (the job page's error banner is the
		// console's own words, so it is left out here).
		for name, v := range map[string]*view{"dlq": views["dlq"], "job": {Title: "Dead letter", Nav: "dlq", Role: "admin key", CSRF: "tok", Data: dl}} {
			if name == "dlq" {
				v.Data.(map[string]any)["F"], v.Data.(map[string]any)["R"], v.Data.(map[string]any)["Lanes"], v.Data.(map[string]any)["Next"] = filterForm{}, replayForm{}, []string{"standard"}, ""
			}
			var buf bytes.Buffer
			if err := pages[name].Execute(&buf, v); err != nil {
				t.Fatalf("render %s: %v", name, err)
			}
			checkNoControls(t, name, buf.Bytes())
		}
	})
}

// TestDescribeFilterShowsTheWholeTimeRange: a replay's filter read
// "accepted since 10:00Z" with no date (a range days ago looked like
// today's) and left out enqueued_before, so a replay of an old window
// (sluicectl --until) looked like one of everything since.
func TestDescribeFilterShowsTheWholeTimeRange(t *testing.T) {
	t.Parallel()
	after := timestamppb.New(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
	before := timestamppb.New(time.Date(2026, 11, 21, 8, 30, 0, 0, time.UTC))
	got := describeFilter(&adminv1.DLQFilter{Tenants: []string{"a"}, EnqueuedAfter: after, EnqueuedBefore: before})
	for _, want := range []string{"2026-11-20 10:00Z", "before 2026-11-21 08:30Z"} {
		if !strings.Contains(got, want) {
			t.Errorf("describeFilter = %q, want it to contain %q", got, want)
		}
	}
	if got := describeFilter(&adminv1.DLQFilter{AllTenants: true, EnqueuedBefore: before}); !strings.Contains(got, "before 2026-11-21 08:30Z") {
		t.Errorf("describeFilter = %q, want the before time", got)
	}
}
