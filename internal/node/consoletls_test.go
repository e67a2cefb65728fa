package node

import (
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/internal/ratelog"
	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

const consoleTestAdminKey = "admin-key-123"

// startConsole serves the console f describes on its own loopback
// listener and returns its URL and its log.
func startConsole(t *testing.T, f ConsoleFlags) (string, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	f.Enabled, f.Listen, f.SampleInterval = true, "127.0.0.1:0", time.Hour
	var url string
	hook, err := f.ConsoleHook(consoleTestAdminKey, false, log, func(u string) { url = u })
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer() // no admin API: the sign-in page calls none
	_, stop, err := hook(t.Context(), nil, srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); srv.Stop() })
	return url, logs
}

// httpsClient is a browser with c's TLS settings that follows no
// redirect and keeps no connection.
func httpsClient(t *testing.T, c tlsflags.Client) *http.Client {
	t.Helper()
	cfg, err := c.Config("")
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{
		Transport:     &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true},
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// TestConsoleOverTLS serves a real console with --console-tls-cert on a
// loopback port: a browser trusting the CA gets the sign-in page and
// Secure cookies, and signs in; one that does not trust it, or speaks
// plain HTTP, gets no page. With --console-tls-client-ca a browser
// without a client certificate is refused at the handshake and one with
// a certificate that CA signed is served. The console served plain HTTP
// only, so its sign-in form sent the admin key in the clear unless a
// proxy stood in front (found in a walkthrough).
func TestConsoleOverTLS(t *testing.T) {
	t.Parallel()
	pki, other := tlstest.New(t), tlstest.New(t)
	tlsOnly := tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}
	mtls := tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA}
	withCert := func(f tlstest.Files) tlsflags.Client {
		return tlsflags.Client{CAFile: pki.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}
	}
	tests := []struct {
		name     string
		server   tlsflags.Server
		wantMode string
		client   tlsflags.Client
		plain    bool // speak plain HTTP to it
		served   bool
	}{
		{"tls, CA trusted", tlsOnly, "tls", tlsflags.Client{CAFile: pki.CA}, false, true},
		{"tls, another CA", tlsOnly, "tls", tlsflags.Client{CAFile: other.CA}, false, false},
		{"tls, plain HTTP", tlsOnly, "tls", tlsflags.Client{}, true, false},
		{"mtls, no client certificate", mtls, "mtls", tlsflags.Client{CAFile: pki.CA}, false, false},
		{"mtls, another CA's client certificate", mtls, "mtls", withCert(other), false, false},
		{"mtls, client certificate", mtls, "mtls", withCert(pki), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, logs := startConsole(t, ConsoleFlags{TLS: tt.server})
			if !strings.HasPrefix(base, "https://127.0.0.1:") {
				t.Fatalf("announced URL %q, want https://127.0.0.1:…", base)
			}
			if l := logs.String(); !strings.Contains(l, "web console listening") || !strings.Contains(l, "tls="+tt.wantMode) || !strings.Contains(l, "url="+base) {
				t.Fatalf("log:\n%s\nwant the listening line with tls=%s and url=%s", l, tt.wantMode, base)
			}
			c := httpsClient(t, tt.client)
			if tt.plain {
				base = "http://" + strings.TrimPrefix(base, "https://")
			}
			resp, err := c.Get(base + "login")
			if !tt.served {
				// net/http answers plain HTTP with a 400 and no page; a TLS
				// client fails the handshake.
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if !tt.plain || resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), `name="csrf"`) {
						t.Fatalf("GET /login: %s\n%s\nwant it refused", resp.Status, b)
					}
				} else if tt.plain {
					t.Fatalf("GET /login in plain HTTP: %v, want a 400", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET /login: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(b))
			if resp.StatusCode != http.StatusOK || m == nil {
				t.Fatalf("GET /login: %s\n%s\nwant the sign-in form", resp.Status, b)
			}
			checkSecure(t, resp)
			// Sign in: the session cookie is Secure too.
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"login",
				strings.NewReader(url.Values{"csrf": {m[1]}, "key": {consoleTestAdminKey}, "next": {"/"}}.Encode()))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for _, ck := range resp.Cookies() {
				req.AddCookie(ck)
			}
			resp, err = c.Do(req)
			if err != nil {
				t.Fatalf("sign in: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign in: %s, want 303 to /", resp.Status)
			}
			checkSecure(t, resp)
		})
	}
}

func checkSecure(t *testing.T, resp *http.Response) {
	t.Helper()
	if len(resp.Cookies()) == 0 {
		t.Fatalf("%s %s set no cookie", resp.Request.Method, resp.Request.URL.Path)
	}
	for _, ck := range resp.Cookies() {
		if !ck.Secure {
			t.Errorf("%s %s: cookie %s is not Secure", resp.Request.Method, resp.Request.URL.Path, ck.Name)
		}
	}
}

// TestConsoleTLSFlags: console TLS without --console-listen, and
// certificates that are missing or do not pair, fail the start with the
// flag to fix, before anything listens; the console off ignores them.
func TestConsoleTLSFlags(t *testing.T) {
	t.Parallel()
	pki, other := tlstest.New(t), tlstest.New(t)
	tests := []struct {
		name    string
		flags   ConsoleFlags
		off     bool     // --console=false
		wantErr []string // none: accepted
	}{
		{
			"tls without --console-listen",
			ConsoleFlags{TLS: tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}},
			false,
			[]string{"--console-tls-cert", "add --console-listen"},
		},
		{
			"client CA without --console-listen",
			ConsoleFlags{TLS: tlsflags.Server{ClientCAFile: pki.CA}},
			false,
			[]string{"--console-tls-client-ca", "add --console-listen"},
		},
		{
			"cert without key",
			ConsoleFlags{Listen: "127.0.0.1:0", TLS: tlsflags.Server{CertFile: pki.ServerCert}},
			false,
			[]string{"--console-tls-cert and --console-tls-key go together"},
		},
		{
			"client CA alone",
			ConsoleFlags{Listen: "127.0.0.1:0", TLS: tlsflags.Server{ClientCAFile: pki.CA}},
			false,
			[]string{"--console-tls-client-ca needs both"},
		},
		{
			"missing certificate file",
			ConsoleFlags{Listen: "127.0.0.1:0", TLS: tlsflags.Server{CertFile: pki.ServerCert + ".gone", KeyFile: pki.ServerKey}},
			false,
			[]string{"--console-tls-cert/--console-tls-key", "no such file"},
		},
		{
			"key of another pair",
			ConsoleFlags{Listen: "127.0.0.1:0", TLS: tlsflags.Server{CertFile: pki.ServerCert, KeyFile: other.ServerKey}},
			false,
			[]string{"--console-tls-cert/--console-tls-key", "private key does not match"},
		},
		{
			"missing client CA",
			ConsoleFlags{Listen: "127.0.0.1:0", TLS: tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA + ".gone"}},
			false,
			[]string{"--console-tls-client-ca", "no such file"},
		},
		{
			"console off",
			ConsoleFlags{TLS: tlsflags.Server{CertFile: pki.ServerCert}},
			true,
			nil,
		},
		{
			"tls with --console-listen",
			ConsoleFlags{Listen: "127.0.0.1:0", TLS: tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA}},
			false,
			nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := tt.flags
			f.Enabled, f.SampleInterval = !tt.off, time.Second
			hook, err := f.ConsoleHook(consoleTestAdminKey, false, slog.New(slog.DiscardHandler), nil)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("ConsoleHook: %v, want accepted", err)
				}
				if (hook != nil) == tt.off {
					t.Fatalf("hook %v with the console off %v", hook != nil, tt.off)
				}
				return
			}
			if err == nil {
				t.Fatalf("ConsoleHook: accepted, want an error saying %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ConsoleHook: %v, want it to say %q", err, want)
				}
			}
		})
	}
}

// TestConsoleWarnsOfPlainHTTPBesideTLS: a console on its own plain HTTP
// listener beside an admin API that serves TLS is served, with a warning
// that says how to give it TLS; with console TLS, behind a TLS proxy
// (--console-secure-cookies), or beside a plaintext admin API, no
// warning. Sharing a TLS admin listener still turns the console off.
func TestConsoleWarnsOfPlainHTTPBesideTLS(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	consoleTLS := tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}
	tests := []struct {
		name     string
		adminTLS bool
		flags    ConsoleFlags
		wantHook bool
		wantWarn string // "": no warning
	}{
		{"plain HTTP beside TLS", true, ConsoleFlags{Listen: "127.0.0.1:0"}, true, "web console serves plain HTTP while the admin API uses TLS"},
		{"console TLS beside TLS", true, ConsoleFlags{Listen: "127.0.0.1:0", TLS: consoleTLS}, true, ""},
		{"behind a TLS proxy", true, ConsoleFlags{Listen: "127.0.0.1:0", SecureCookies: true}, true, ""},
		{"plain HTTP beside plaintext", false, ConsoleFlags{Listen: "127.0.0.1:0"}, true, ""},
		{"sharing a TLS admin listener", true, ConsoleFlags{}, false, "web console off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs syncbuf.Buffer
			f := tt.flags
			f.Enabled, f.SampleInterval = true, time.Second
			hook, err := f.ConsoleHook(consoleTestAdminKey, tt.adminTLS, slog.New(slog.NewTextHandler(&logs, nil)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if (hook != nil) != tt.wantHook {
				t.Errorf("hook %v, want %v", hook != nil, tt.wantHook)
			}
			// (tlstest's certificates expire within a day: that is warned of too.)
			warns := strings.Count(logs.String(), `level=WARN msg="web console`)
			switch {
			case tt.wantWarn == "" && warns > 0:
				t.Errorf("log:\n%s\nwant no warning", logs.String())
			case tt.wantWarn != "" && (warns != 1 || !strings.Contains(logs.String(), tt.wantWarn) || !strings.Contains(logs.String(), "--console-tls-cert and --console-tls-key")):
				t.Errorf("log:\n%s\nwant one warning saying %q and naming --console-tls-cert and --console-tls-key", logs.String(), tt.wantWarn)
			}
		})
	}
}

// TestConsoleRefusedHandshakesAreRateLimited: many refused TLS
// handshakes on a real console (a browser distrusting its certificate,
// plain HTTP) make one log line, with a hint. net/http logged each one,
// so a scanner or a misconfigured health check flooded the log.
func TestConsoleRefusedHandshakesAreRateLimited(t *testing.T) {
	t.Parallel()
	pki, other := tlstest.New(t), tlstest.New(t)
	base, logs := startConsole(t, ConsoleFlags{TLS: tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}})
	distrusting, plain := httpsClient(t, tlsflags.Client{CAFile: other.CA}), httpsClient(t, tlsflags.Client{})
	if _, err := distrusting.Get(base + "login"); err == nil {
		t.Fatal("a client trusting another CA was served")
	}
	const refused = "web console: TLS handshake refused"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), refused) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for range 20 {
		if _, err := distrusting.Get(base + "login"); err == nil {
			t.Fatal("a client trusting another CA was served")
		}
		resp, err := plain.Get("http://" + strings.TrimPrefix(base, "https://") + "login")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	log := logs.String()
	if n := strings.Count(log, refused); n != 1 || !strings.Contains(log, "the browser refused the console's certificate") {
		t.Fatalf("log:\n%s\nwant one line of a refused handshake (of 41), with the hint for a distrusted certificate; got %d", log, n)
	}
	if strings.Contains(log, "http: TLS handshake error") {
		t.Errorf("log:\n%s\nwant net/http's lines of refused handshakes left out", log)
	}
}

// TestConsoleHTTPErrorLog: the console's ErrorLog passes net/http's
// lines on as they are, but refused handshakes at most one line per
// interval, the next counting those left out, and none for connections
// closed before a word.
func TestConsoleHTTPErrorLog(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := httpErrorLog(slog.New(slog.NewTextHandler(&logs, nil)), &ratelog.Line{Now: func() time.Time { return now }}, true)
	for i := range 5 {
		l.Printf("http: TLS handshake error from 127.0.0.1:%d: tls: client didn't provide a certificate", 5000+i)
		l.Printf("http: TLS handshake error from [::1]:%d: EOF", 6000+i) // a port probe
	}
	l.Printf("http: superfluous response.WriteHeader call from x (y.go:1)")
	l.Printf("http: superfluous response.WriteHeader call from x (y.go:1)")
	now = now.Add(ratelog.Every)
	l.Printf("http: TLS handshake error from 127.0.0.1:7000: remote error: tls: bad certificate")

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{
		`level=WARN msg="web console: TLS handshake refused" client=127.0.0.1:5000 error="tls: client didn't provide a certificate" hint="the browser sent no certificate signed by --console-tls-client-ca`,
		`level=WARN msg="http: superfluous response.WriteHeader call from x (y.go:1)"`,
		`level=WARN msg="http: superfluous response.WriteHeader call from x (y.go:1)"`,
		`level=WARN msg="web console: TLS handshake refused" client=127.0.0.1:7000 error="remote error: tls: bad certificate" hint="the browser refused the console's certificate`,
	}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s\nwant %d lines", logs.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to hold %s", i, lines[i], w)
		}
	}
	if strings.Contains(lines[0], "suppressed") || !strings.HasSuffix(lines[3], "suppressed_since_last_line=4") {
		t.Errorf("log:\n%s\nwant the second refusal line to count the 4 left out, and the first none", logs.String())
	}
}
