package client_test

import (
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

// TestMutualTLS serves the scripted gateway with TLS that requires a
// client certificate, as cmd/gateway does with --tls-cert, --tls-key and
// --tls-client-ca, and dials it with LoadTLS.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	files := tlstest.New(t)
	serverTLS, err := tlsflags.Server{CertFile: files.ServerCert, KeyFile: files.ServerKey, ClientCAFile: files.CA}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{submit: answerSubmit(nil)}
	serveScripted(t, s, grpc.Creds(credentials.NewTLS(serverTLS)))

	mtls, err := client.LoadTLS(files.CA, files.ClientCert, files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	res, err := dial(t, s.addr, client.Config{TLS: mtls}).Submit(t.Context(), client.Job{Payload: []byte("x")})
	if err != nil || res.JobID == "" {
		t.Fatalf("with a client certificate: %+v, %v", res, err)
	}
	if c := s.recorded(); len(c) != 1 || c[0].auth != "Bearer test-key" {
		t.Fatalf("calls %+v", c)
	}

	noCert, err := client.LoadTLS(files.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, s.addr, client.Config{TLS: noCert, MaxAttempts: 1}).Submit(t.Context(), client.Job{Payload: []byte("x")}); err == nil {
		t.Fatal("accepted without a client certificate")
	}
	if _, err := dial(t, s.addr, client.Config{MaxAttempts: 1}).Submit(t.Context(), client.Job{Payload: []byte("x")}); err == nil {
		t.Fatal("the system roots trusted the test CA")
	}
	if n := len(s.recorded()); n != 1 {
		t.Fatalf("%d calls reached the server, want only the first", n)
	}
	if _, err := client.LoadTLS(files.CA, files.ClientCert, ""); err == nil {
		t.Fatal("LoadTLS accepted a certificate without its key")
	}
}

// TestTLSMismatch: a client whose TLS does not match the gateway's gets
// an error that says what to change, and at once when no retry can heal
// it. The default Config (TLS) against a plaintext gateway was retried
// for about 8 s and ended in "tls: first record does not look like a TLS
// handshake" (found by a tester).
func TestTLSMismatch(t *testing.T) {
	t.Parallel()
	files := tlstest.New(t)
	serverTLS, err := tlsflags.Server{CertFile: files.ServerCert, KeyFile: files.ServerKey}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tlsGateway := &scripted{submit: answerSubmit(nil)}
	serveScripted(t, tlsGateway, grpc.Creds(credentials.NewTLS(serverTLS)))
	plainGateway := &scripted{submit: answerSubmit(nil)}
	serveScripted(t, plainGateway)
	trusted, err := client.LoadTLS(files.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// An expired client certificate, of a CA the gateway takes, and a
	// gateway whose own certificate has expired: the client retried 8
	// times and ended with "remote error: tls: expired certificate", or
	// "write: broken pipe" (found by a tester).
	expired := tlstest.NewUntil(t, time.Now().Add(-time.Hour))
	takesExpired, err := tlsflags.Server{CertFile: files.ServerCert, KeyFile: files.ServerKey, ClientCAFile: expired.CA}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mtlsGateway := &scripted{submit: answerSubmit(nil)}
	serveScripted(t, mtlsGateway, grpc.Creds(credentials.NewTLS(takesExpired)))
	expiredCert, err := client.LoadTLS(files.CA, expired.ClientCert, expired.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	expiredServerTLS, err := tlsflags.Server{CertFile: expired.ServerCert, KeyFile: expired.ServerKey}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	expiredGateway := &scripted{submit: answerSubmit(nil)}
	serveScripted(t, expiredGateway, grpc.Creds(credentials.NewTLS(expiredServerTLS)))
	trustsExpired, err := client.LoadTLS(expired.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		addr     string
		cfg      client.Config
		hint     string
		attempts int // made before the error
	}{
		{"TLS to plaintext", plainGateway.addr, client.Config{TLS: trusted}, "the gateway serves plaintext: set Config.Insecure", 1},
		{"untrusted certificate", tlsGateway.addr, client.Config{TLS: &tls.Config{MinVersion: tls.VersionTLS12}}, "not signed by a CA the client trusts", 1},
		{"expired client certificate", mtlsGateway.addr, client.Config{TLS: expiredCert}, "the client certificate (Config.TLS, LoadTLS's certFile) CN=sluice-test-client expired at", 1},
		{"expired gateway certificate", expiredGateway.addr, client.Config{TLS: trustsExpired}, "the gateway's certificate (its --tls-cert) has expired or is not yet valid", 1},
		// A stopping gateway closes connections the same way: retried.
		{"plaintext to TLS", tlsGateway.addr, client.Config{Insecure: true, MaxAttempts: 2, BackoffBase: time.Millisecond}, "leave Config.Insecure unset", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Several times: a refused client certificate reaches the
			// client as the server's alert or, the alert lost, as
			// "write: broken pipe", about half the time each.
			for range 4 {
				_, err := dial(t, tc.addr, tc.cfg).Submit(t.Context(), client.Job{Payload: []byte("x")})
				if err == nil || !strings.Contains(err.Error(), tc.hint) {
					t.Fatalf("Submit: %v; want an error saying %q", err, tc.hint)
				}
				if status.Code(err) != codes.Unavailable {
					t.Errorf("code %v, want Unavailable", status.Code(err))
				}
				retried := strings.Contains(err.Error(), "gave up after")
				if want := tc.attempts > 1; retried != want {
					t.Errorf("Submit: %v; retried %t, want %t", err, retried, want)
				}
			}
		})
	}
}

// TestNotAnIngestListener: a client pointed at a listener that serves no
// ingest API (a drainer's worker or admin port) is told which address to
// give; it got gRPC's bare "unknown service" (found by a tester).
func TestNotAnIngestListener(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer() // serves nothing, as the ingest API goes
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	_, err = dial(t, lis.Addr().String(), client.Config{}).Submit(t.Context(), client.Job{Payload: []byte("x")})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "the address serves no ingest API: give the gateway's --listen address") {
		t.Fatalf("Submit: %v; want UNIMPLEMENTED naming the address to give", err)
	}
}
