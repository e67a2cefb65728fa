package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
	"github.com/sluice-dev/sluice/worker"
)

// TestConnectTLSFailures runs Connect against real TLS listeners on
// loopback. A failure only the worker's own settings can heal ends
// Connect with ErrRefused, as a refused key does; one sluice's side can
// heal is retried, each warning saying what to change. Workers retried
// all of them for ever, and about half the warnings, "write: broken
// pipe", named nothing to change (found by a tester).
func TestConnectTLSFailures(t *testing.T) {
	t.Parallel()
	pki, other := tlstest.New(t), tlstest.New(t)
	expired := tlstest.NewUntil(t, time.Now().Add(-time.Hour))
	listen := func(s tlsflags.Server) string {
		t.Helper()
		var opts []grpc.ServerOption
		if s.Enabled() {
			cfg, err := s.Config("", quiet)
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(opts...) // the handshake fails before any service
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	tlsAddr := listen(tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey})
	mtlsAddr := listen(tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA})
	takesExpiredAddr := listen(tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: expired.CA})
	expiredServerAddr := listen(tlsflags.Server{CertFile: expired.ServerCert, KeyFile: expired.ServerKey})
	plainAddr := listen(tlsflags.Server{})
	// A listener that closes each connection at once, as a proxy with no
	// backend or a stopping sluice does: not TLS.
	closer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	go func() {
		for {
			c, err := closer.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()

	tests := []struct {
		name    string
		addr    string
		client  tlsflags.Client
		refused bool   // Connect returns ErrRefused; else it retries until ctx ends
		want    string // in the error, or in every reconnect warning
	}{
		{
			"own certificate expired", takesExpiredAddr,
			tlsflags.Client{CAFile: pki.CA, CertFile: expired.ClientCert, KeyFile: expired.ClientKey},
			true,
			"the worker's client certificate (--tls-cert) CN=sluice-test-client expired at",
		},
		{"no client certificate", mtlsAddr, tlsflags.Client{CAFile: pki.CA}, true, "sluice takes only workers with a client certificate"},
		{"untrusted sluice certificate", tlsAddr, tlsflags.Client{CAFile: other.CA}, true, "did not sign sluice's certificate"},
		{"plaintext to TLS", tlsAddr, tlsflags.Client{}, true, "sluice's --worker-listen serves TLS (it answered a TLS handshake)"},
		{"TLS to plaintext", plainAddr, tlsflags.Client{CAFile: pki.CA}, true, "serves plain text"},
		// sluice restarted with a --tls-client-ca that names the CA heals it.
		{
			"client certificate of another CA", mtlsAddr,
			tlsflags.Client{CAFile: pki.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey},
			false,
			"--tls-client-ca",
		},
		// A renewed certificate written over sluice's files heals it.
		{"sluice's certificate expired", expiredServerAddr, tlsflags.Client{CAFile: expired.CA}, false, "sluice's certificate (its --tls-cert) has expired"},
		{"plaintext to a listener that closes at once", closer.Addr().String(), tlsflags.Client{}, false, "if sluice's --worker-listen serves TLS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := tc.client.Config("")
			if err != nil {
				t.Fatal(err)
			}
			var logs syncbuf.Buffer
			wait := 10 * time.Second
			if !tc.refused {
				wait = 2 * time.Second
			}
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			err = worker.Connect(ctx, tc.addr, "worker-key", func(context.Context, worker.Job) error { return nil },
				worker.ConnectOptions{TLS: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if tc.refused {
				if !errors.Is(err, worker.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Connect: %v (ctx %v), want ErrRefused saying %q; log:\n%s", err, ctx.Err(), tc.want, logs.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("Connect: %v, want it to retry until ctx ends", err)
			}
			var lines int
			for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
				if !strings.Contains(l, "pull stream ended; reconnecting") {
					continue
				}
				lines++
				if !strings.Contains(l, tc.want) {
					t.Errorf("reconnect warning without the hint %q:\n%s", tc.want, l)
				}
			}
			if lines < 2 {
				t.Fatalf("%d reconnect warnings, want several; log:\n%s", lines, logs.String())
			}
		})
	}
}
