package tlsflags

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

// serveTLS runs a serve.Server (health and reflection only) with s's TLS
// setting on a loopback port and returns its address.
func serveTLS(t *testing.T, s Server) string {
	t.Helper()
	return serveTLSLogged(t, s, slog.New(slog.DiscardHandler))
}

// serveTLSLogged is serveTLS with the listener's refused handshakes
// logged to log.
func serveTLSLogged(t *testing.T, s Server, log *slog.Logger) string {
	t.Helper()
	opts, err := s.ServerOptions("", log)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil, opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, 0) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return lis.Addr().String()
}

// check makes one health call through a client with c's setting.
func check(t *testing.T, addr string, c Client) error {
	t.Helper()
	dial, err := c.DialOption("")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestTLSAndMutualTLS(t *testing.T) {
	t.Parallel()
	pki, other := tlstest.New(t), tlstest.New(t)
	tlsAddr := serveTLS(t, Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey})
	mtlsAddr := serveTLS(t, Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA})
	plainAddr := serveTLS(t, Server{})
	withCert := Client{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	tests := []struct {
		name   string
		addr   string
		client Client
		ok     bool
	}{
		{"plaintext server, plaintext client", plainAddr, Client{}, true},
		{"TLS server, plaintext client", tlsAddr, Client{}, false},
		{"TLS server, client trusting its CA", tlsAddr, Client{CAFile: pki.CA}, true},
		{"TLS server, client with system roots only", tlsAddr, Client{Enabled: true}, false},
		{"TLS server, client trusting another CA", tlsAddr, Client{CAFile: other.CA}, false},
		{"TLS server, wrong server name", tlsAddr, Client{CAFile: pki.CA, ServerName: "gateway.example"}, false},
		{"TLS server, matching server name", tlsAddr, Client{CAFile: pki.CA, ServerName: "localhost"}, true},
		{"mTLS server, client without certificate", mtlsAddr, Client{CAFile: pki.CA}, false},
		{"mTLS server, client certificate of another CA", mtlsAddr, Client{CAFile: pki.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey}, false},
		{"mTLS server, client certificate", mtlsAddr, withCert, true},
		{"plaintext server, TLS client", plainAddr, Client{CAFile: pki.CA}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := check(t, tt.addr, tt.client)
			if (err == nil) != tt.ok {
				t.Fatalf("health check: %v (%v), want ok %v", status.Code(err), err, tt.ok)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	notPEM := pki.CA + ".txt"
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := []struct {
		name string
		s    Server
		want string
	}{
		{"key without cert", Server{KeyFile: pki.ServerKey}, "--admin-tls-cert and --admin-tls-key go together"},
		{"client CA alone", Server{ClientCAFile: pki.CA}, "go together"},
		{"missing cert file", Server{CertFile: pki.CA + ".nope", KeyFile: pki.ServerKey}, "no such file"},
		{"mismatched pair", Server{CertFile: pki.ServerCert, KeyFile: pki.ClientKey}, "private key does not match"},
		{"CA not PEM", Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: notPEM}, "--admin-tls-client-ca: " + notPEM + " holds no PEM certificate"},
	}
	for _, tt := range servers {
		if _, err := tt.s.Config("admin-", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
	clients := []struct {
		name string
		c    Client
		want string
	}{
		{"cert without key", Client{CertFile: pki.ClientCert}, "--worker-tls-cert and --worker-tls-key go together"},
		{"CA not PEM", Client{CAFile: notPEM}, "--worker-tls-ca"},
	}
	for _, tt := range clients {
		if _, err := tt.c.Config("worker-"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
	if cfg, err := (Server{}).Config("", slog.New(slog.DiscardHandler)); cfg != nil || err != nil {
		t.Errorf("no files: %v, %v; want plaintext", cfg, err)
	}
}

func TestFlagsAndFallback(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var ingest, admin Server
	var worker Client
	ingest.Register(fs, "", "the ingest API")
	admin.Register(fs, "admin-", "the admin API")
	worker.Register(fs, "worker-", "the worker")
	if err := fs.Parse([]string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--worker-tls-server-name", "w.example"}); err != nil {
		t.Fatal(err)
	}
	if got := admin.Or(ingest); got != ingest {
		t.Errorf("admin without its own flags = %+v, want the shared %+v", got, ingest)
	}
	admin.ClientCAFile = "ops-ca.pem"
	if got := admin.Or(ingest); got != admin {
		t.Errorf("admin with its own flags = %+v", got)
	}
	if !worker.on() || worker.ServerName != "w.example" {
		t.Errorf("worker = %+v, want TLS on", worker)
	}
}

// TestCertificateRotation replaces the server's files: new handshakes get
// the new certificate, without a restart.
func TestCertificateRotation(t *testing.T) {
	t.Parallel()
	first, second := tlstest.New(t), tlstest.New(t)
	var logged bytes.Buffer
	kp, err := newKeyPair(first.ServerCert, first.ServerKey, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := kp.get(nil)
	copyFile(t, second.ServerCert, first.ServerCert)
	// Written the certificate but not yet its key: the old pair stays,
	// and the failed reload is logged once, not at every handshake.
	for range 3 {
		kp.checkedAt = time.Time{}
		if got, _ := kp.get(nil); got != before {
			t.Fatal("a half-written pair replaced the certificate")
		}
	}
	copyFile(t, second.ServerKey, first.ServerKey)
	kp.checkedAt, kp.stamp = time.Time{}, [2]time.Time{}
	after, err := kp.get(nil)
	if err != nil || after == before || string(after.Certificate[0]) == string(before.Certificate[0]) {
		t.Fatalf("certificate not rotated: %v", err)
	}
	for _, want := range []struct {
		line string
		n    int
	}{{"msg=\"TLS certificate loaded\"", 1}, {"level=ERROR msg=\"TLS certificate files changed but do not load", 1}, {"msg=\"TLS certificate reloaded\"", 1}} {
		if got := strings.Count(logged.String(), want.line); got != want.n {
			t.Errorf("%d lines %s, want %d; log:\n%s", got, want.line, want.n, logged.String())
		}
	}
}

// TestCertificateExpiryWarned: a certificate that has expired, or expires
// within two weeks, is warned of when it is loaded; a later one is not.
func TestCertificateExpiryWarned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		notAfter time.Duration
		want     string
	}{
		{"expired", -time.Hour, "TLS certificate has expired"},
		{"expires in 3 days", 72 * time.Hour, "TLS certificate expires soon"},
		{"expires in 60 days", 60 * 24 * time.Hour, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files := tlstest.NewUntil(t, time.Now().Add(tc.notAfter))
			var logged bytes.Buffer
			if _, err := newKeyPair(files.ServerCert, files.ServerKey, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
				t.Fatal(err)
			}
			warned := strings.Contains(logged.String(), "level=WARN")
			if tc.want == "" && warned || tc.want != "" && !strings.Contains(logged.String(), "level=WARN msg=\""+tc.want) {
				t.Fatalf("log after loading a certificate that %s:\n%s", tc.name, logged.String())
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
