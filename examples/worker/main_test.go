package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
	"github.com/sluice-dev/sluice/worker"
)

// TestAddressesFromEnvironment: the worker pulls from SLUICE_PULL_ADDR and
// serves the push API on SLUICE_PUSH_LISTEN. It read SLUICE_WORKER_ADDR
// and SLUICE_WORKER_LISTEN, which the gateway reads as --worker-addr (the
// push worker's address) and --worker-listen (where pull workers connect):
// the same names for the other address each, so an environment shared
// with the gateway pointed one of them at the wrong place (found in
// review). The old names alone are still read, with a warning naming the
// new one. (Not parallel: it sets the environment.)
func TestAddressesFromEnvironment(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // in the output
		not  string   // not in the output
	}{
		{
			"pull",
			map[string]string{"SLUICE_PULL_ADDR": "127.0.0.1:7301", "SLUICE_WORKER_ADDR": "127.0.0.1:7302"},
			[]string{"pulling jobs from 127.0.0.1:7301"},
			"SLUICE_WORKER_ADDR",
		},
		{
			"pull, old name",
			map[string]string{"SLUICE_WORKER_ADDR": "127.0.0.1:7302"},
			[]string{"pulling jobs from 127.0.0.1:7302", "set SLUICE_PULL_ADDR"},
			"",
		},
		{
			"push",
			map[string]string{"SLUICE_PUSH_LISTEN": "127.0.0.1:0", "SLUICE_WORKER_LISTEN": "127.0.0.1:7303"},
			[]string{"worker listening on 127.0.0.1:0"},
			"SLUICE_WORKER_LISTEN",
		},
		{
			"push, old name",
			map[string]string{"SLUICE_WORKER_LISTEN": "127.0.0.1:0"},
			[]string{"worker listening on 127.0.0.1:0", "set SLUICE_PUSH_LISTEN"},
			"",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"SLUICE_PULL_ADDR", "SLUICE_WORKER_ADDR", "SLUICE_PUSH_LISTEN", "SLUICE_WORKER_LISTEN"} {
				t.Setenv(k, tt.env[k])
			}
			ctx, cancel := context.WithCancel(t.Context())
			cancel() // print where it would work, then stop
			var out strings.Builder
			_ = run(ctx, []string{"--key", "k"}, &out)
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if tt.not != "" && strings.Contains(out.String(), tt.not) {
				t.Errorf("output mentions %s:\n%s", tt.not, out.String())
			}
		})
	}
}

// TestPullsOverTLS: pulling had no TLS options, ignored --tls-cert and
// --tls-key (the push server's), and discarded worker.Connect's log, so a
// worker pointed at a --worker-listen that serves TLS printed "pulling
// jobs" and then nothing (found in a walkthrough). With --tls-ca it dials
// TLS: against a TLS server that has no worker API the handshake
// succeeds and the worker stops, told so. Without it, it stops too,
// saying the listener serves TLS.
func TestPullsOverTLS(t *testing.T) {
	t.Parallel()
	files := tlstest.New(t)
	cert, err := tls.LoadX509KeyPair(files.ServerCert, files.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()

	t.Run("with --tls-ca", func(t *testing.T) {
		t.Parallel()
		var out strings.Builder
		err := run(t.Context(), []string{"--addr", addr, "--key", "k", "--tls-ca", files.CA}, &out)
		if !errors.Is(err, worker.ErrRefused) || !strings.Contains(err.Error(), "does not serve the worker API") {
			t.Fatalf("run: %v, want the TLS server's refusal (the handshake worked)\n%s", err, out.String())
		}
	})
	t.Run("plain text", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		var out syncbuf.Buffer
		err := run(ctx, []string{"--addr", addr, "--key", "k"}, &out)
		// The server answers a TLS probe: no retry helps until the
		// worker dials TLS, so it stops, saying so.
		if !errors.Is(err, worker.ErrRefused) || !strings.Contains(err.Error(), "serves TLS") {
			t.Fatalf("run: %v, want ErrRefused saying the listener serves TLS\n%s", err, out.String())
		}
	})
	t.Run("push flag", func(t *testing.T) {
		t.Parallel()
		err := run(t.Context(), []string{"--addr", addr, "--key", "k", "--tls-client-ca", files.CA}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--tls-client-ca is for --listen") {
			t.Fatalf("run: %v, want --tls-client-ca refused when pulling", err)
		}
	})
}
