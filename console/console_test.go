package console

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

// idleAdmin is an admin API client that is never called: key checks
// happen before any call (grpc.NewClient does not connect until used).
func idleAdmin(t *testing.T) adminv1.AdminServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///unused", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return adminv1.NewAdminServiceClient(conn)
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ give, want string }{
		{"/dlq?tenant=a", "/dlq?tenant=a"},
		{"/", "/"},
		{"", "/"},
		{"https://evil.example/", "/"},
		{"//evil.example/", "/"},
		{"/\\evil.example", "/"},
		{"/ok\r\nSet-Cookie: x=y", "/"},
		{"javascript:alert(1)", "/"},
		// Browsers drop tabs and newlines from a URL, so these are
		// //evil.example to them (found in review: a tab got through).
		{"/\t/evil.example/", "/"},
		{"/\x00/evil.example/", "/"},
		{"/dlq?tenant=a\x7f", "/"},
	} {
		if got := safeNext(tc.give); got != tc.want {
			t.Errorf("safeNext(%q) = %q, want %q", tc.give, got, tc.want)
		}
	}
}

func TestKeyRoles(t *testing.T) {
	t.Parallel()
	withRO, err := New(Config{Admin: nil, AdminKey: "admin-key"})
	if err == nil || withRO != nil {
		t.Fatal("New without an admin client succeeded")
	}
	if _, err := New(Config{Admin: idleAdmin(t), AdminKey: "k", ReadOnlyKey: "k"}); err == nil {
		t.Fatal("a read-only key equal to the admin key was accepted")
	}
	c, err := New(Config{Admin: idleAdmin(t), AdminKey: "admin-key", ReadOnlyKey: "ro-key", SessionTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want role
		ok   bool
	}{
		{"admin-key", roleAdmin, true},
		{"ro-key", roleReadOnly, true},
		{"sk_dev_tenant", 0, false},
		{"", 0, false},
		{"admin-key ", 0, false},
	} {
		if got, ok := c.keyRole(tc.key); got != tc.want || ok != tc.ok {
			t.Errorf("keyRole(%q) = %v, %v; want %v, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
	noRO, err := New(Config{Admin: idleAdmin(t), AdminKey: "admin-key"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := noRO.keyRole(""); ok {
		t.Error("with no read-only key, the empty key signs in")
	}
}

func TestChartLines(t *testing.T) {
	t.Parallel()
	now := time.Now()
	at := func(i int) time.Time { return now.Add(time.Duration(i-5) * time.Second) }
	util := []float64{0.5, 0.6, -1, 0.7, 0.8, -1}
	var samples []sample
	for i, u := range util {
		samples = append(samples, sample{at: at(i), lanes: map[string]laneStat{"standard": {Lane: "standard", Waiting: int64(10 * i), Utilization: u, Fairness: -1}}})
	}
	for _, tc := range []struct {
		name  string
		kind  chartKind
		class string
		lines int    // polylines of class
		label string // an axis label
	}{
		{"waiting jobs: one line, axis to a round 80", counts, "s-waiting", 1, ">80</text>"},
		{"utilization: a gap where the lane's jobs never waited", ratios, "s-util", 2, ">0.5</text>"},
		{"fairness unknown throughout: no line", ratios, "s-fair", 0, ">1</text>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(chart(tc.kind, samples, "standard", 10*time.Second, now))
			if n := strings.Count(got, `<polyline class="`+tc.class+`"`); n != tc.lines {
				t.Errorf("%d polylines of class %s, want %d:\n%s", n, tc.class, tc.lines, got)
			}
			if !strings.Contains(got, tc.label) {
				t.Errorf("no axis label %s:\n%s", tc.label, got)
			}
		})
	}
}

// signIn signs in to c through the form, as a browser at remote (empty:
// httptest's address) does: it gets the sign-in page for its CSRF cookie,
// then posts key and next with it.
func signIn(c *Console, remote, key, next string) *httptest.ResponseRecorder {
	get := httptest.NewRecorder()
	c.ServeHTTP(get, httptest.NewRequest(http.MethodGet, "/login?next="+url.QueryEscape(next), nil))
	form := url.Values{"key": {key}, "next": {next}}
	var login *http.Cookie
	for _, ck := range get.Result().Cookies() {
		if ck.Name == loginCookie {
			login = ck
			form.Set("csrf", ck.Value)
		}
	}
	req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if remote != "" {
		req.RemoteAddr = remote
	}
	if login != nil {
		req.AddCookie(login)
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, req)
	return w
}

// TestSignInStaysOnTheConsole signs in through the form with a next that
// a browser reads as another site: the redirect must stay on the console.
func TestSignInStaysOnTheConsole(t *testing.T) {
	t.Parallel()
	c, err := New(Config{Admin: idleAdmin(t), AdminKey: "admin-key", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, next := range []string{"/\t/evil.example/", "/\n/evil.example/", "//evil.example/"} {
		w := signIn(c, "", "admin-key", next)
		if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != "/" {
			t.Errorf("sign-in with next=%q: status %d, Location %q; want 303 to /", next, w.Code, loc)
		}
	}
}

// TestFailedSignInNamesOnlyConfiguredKeys: a wrong key was told to sign
// in "with the admin key … or the read-only key" on a console with no
// read-only key. The read-only key is named only when there is one.
func TestFailedSignInNamesOnlyConfiguredKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		readOnlyKey string
		mention     bool
	}{{"", false}, {"ro-key", true}} {
		c, err := New(Config{Admin: idleAdmin(t), AdminKey: "admin-key", ReadOnlyKey: tc.readOnlyKey, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		w := signIn(c, "", "sk_dev_tenant", "")
		body := w.Body.String()
		if w.Code != http.StatusUnauthorized || !strings.Contains(body, "Not the admin key") {
			t.Fatalf("wrong key (read-only key %q): status %d, want 401 with the refusal:\n%s", tc.readOnlyKey, w.Code, body)
		}
		if got := strings.Contains(body, "read-only key"); got != tc.mention {
			t.Errorf("wrong key with read-only key %q configured: the page names the read-only key: %v, want %v:\n%s", tc.readOnlyKey, got, tc.mention, body)
		}
	}
}

// TestStaticServesOnlyTheStylesheet: /static/ serves the static folder
// and nothing else of the embedded files, whatever the path says; it
// listed and served the templates (/static/%2e%2e/templates/layout.html),
// without sign-in (found in a review).
func TestStaticServesOnlyTheStylesheet(t *testing.T) {
	t.Parallel()
	c, err := New(Config{Admin: idleAdmin(t), AdminKey: "admin-key-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		code int
	}{
		{"/static/console.css", http.StatusOK},
		{"/static/%2e%2e/templates/layout.html", http.StatusNotFound},
		{"/static/%2e%2e/templates/", http.StatusNotFound},
		{"/static/../templates/layout.html", http.StatusNotFound},
		{"/static/%2e%2e/%2e%2e/etc/passwd", http.StatusNotFound},
	} {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tt.path, nil))
		body := w.Body.String()
		if w.Code != tt.code && !(tt.code == http.StatusNotFound && w.Code >= 300 && w.Code < 400 && !strings.Contains(body, "{{")) {
			t.Errorf("GET %s: %d, want %d; body %.200q", tt.path, w.Code, tt.code, body)
		}
		if strings.Contains(body, "{{") || strings.Contains(body, "dlq.html") {
			t.Errorf("GET %s served a template: %.200q", tt.path, body)
		}
	}
}

// TestRefusedSignInsArePaced: after a burst of refused sign-ins from one
// address, its next are answered 429 without looking at the key, the
// right key included, while another address signs in; nothing slowed a
// guesser, who tried 300 keys in 3.5 s (found in a review).
func TestRefusedSignInsArePaced(t *testing.T) {
	t.Parallel()
	c, err := New(Config{Admin: idleAdmin(t), AdminKey: "admin-key-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	answer := func(remote, key string) int { return signIn(c, remote, key, "").Code }
	guesser, admin := "192.0.2.7:5000", "192.0.2.8:5000"
	refused := 0
	for i := range 50 {
		switch code := answer(guesser, fmt.Sprint("guess-", i)); code {
		case http.StatusUnauthorized:
			refused++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("guess %d: status %d", i, code)
		}
	}
	if refused > failedSignInBurst+2 {
		t.Errorf("%d of 50 quick guesses were looked at, want about %d", refused, failedSignInBurst)
	}
	if code := answer(guesser, "admin-key-1"); code != http.StatusTooManyRequests {
		t.Errorf("the right key from the paced address: status %d, want 429 (the key is not looked at)", code)
	}
	if code := answer(admin, "admin-key-1"); code != http.StatusSeeOther {
		t.Errorf("the right key from another address: status %d, want 303", code)
	}
}

// TestSecureCookies: with SecureCookies (--console-secure-cookies, for a
// console behind a TLS proxy) the cookies are marked Secure; without it
// they are not, for a console on plain HTTP.
func TestSecureCookies(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		c, err := New(Config{Admin: idleAdmin(t), AdminKey: "admin-key-1", SecureCookies: secure, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/login", nil))
		cookies := w.Result().Cookies()
		if len(cookies) == 0 {
			t.Fatal("the sign-in page set no cookie")
		}
		for _, ck := range cookies {
			if ck.Secure != secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
				t.Errorf("SecureCookies %v: cookie %s: Secure %v, HttpOnly %v, SameSite %v", secure, ck.Name, ck.Secure, ck.HttpOnly, ck.SameSite)
			}
		}
	}
}
