package worker

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

// TestAlertAfterHandshake: a listener that requires client certificates
// answers a probe without one with its refusal alert, which makes the
// reconnect final; one that takes the handshake answers nothing.
func TestAlertAfterHandshake(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	listen := func(s tlsflags.Server) string {
		t.Helper()
		cfg, err := s.Config("", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	mtls := listen(tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA})
	plain := listen(tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey})
	cfg, err := tlsflags.Client{CAFile: pki.CA}.Config("")
	if err != nil {
		t.Fatal(err)
	}

	alert := alertAfterHandshake(context.Background(), mtls, cfg, nil)
	if alert == nil || !strings.Contains(alert.Error(), "certificate required") {
		t.Fatalf("probe of a listener requiring client certificates: %v, want its alert", alert)
	}
	if hint, final := tlsHint(alert, cfg); !final || !strings.Contains(hint, "only workers with a client certificate") {
		t.Fatalf("tlsHint(%v) = %q, final %t; want the missing certificate named, final", alert, hint, final)
	}
	if alert := alertAfterHandshake(context.Background(), plain, cfg, nil); alert != nil {
		t.Fatalf("probe of a listener that took the handshake: %v, want nil", alert)
	}
}
