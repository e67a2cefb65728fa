package client_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

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
	serverTLS, err := tlsflags.Server{CertFile: files.ServerCert, KeyFile: files.ServerKey, ClientCAFile: files.CA}.Config("")
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
