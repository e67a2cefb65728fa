package cliconn_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/cliconn"
	"github.com/sluice-dev/sluice/internal/tlsflags"
)

// TestDialSendsTheKey calls a real gRPC server on a loopback port and
// checks that every call carries the key as a bearer token.
func TestDialSendsTheKey(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []string, 2)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got <- md.Get("authorization")
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := cliconn.Dial(lis.Addr().String(), "--addr", "k-123", tlsflags.Client{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 2 {
		if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		if a := <-got; len(a) != 1 || a[0] != "Bearer k-123" {
			t.Fatalf("authorization %q, want one \"Bearer k-123\"", a)
		}
	}
}

func TestDialRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		addr string
		key  string
		tls  tlsflags.Client
	}{
		{"no key", "127.0.0.1:1", "", tlsflags.Client{}},
		{"cert without key", "127.0.0.1:1", "k", tlsflags.Client{CertFile: "c.pem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if conn, err := cliconn.Dial(tt.addr, "--addr", tt.key, tt.tls); err == nil {
				conn.Close()
				t.Fatal("Dial succeeded")
			}
		})
	}
}

// TestReached tells an UNAVAILABLE the server answered from a server that
// could not be reached; both keep their code and message.
func TestReached(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Unavailable, "job not stored: no space left on device")
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	for _, tt := range []struct {
		name    string
		addr    string
		reached bool
		message string
	}{
		{"answered", lis.Addr().String(), true, "job not stored: no space left on device"},
		{"nothing listening", closedAddr, false, "connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := cliconn.Dial(tt.addr, "--addr", "k", tlsflags.Client{})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
			st := status.Convert(err)
			if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), tt.message) {
				t.Fatalf("error %v, want UNAVAILABLE with %q", err, tt.message)
			}
			if got := cliconn.Reached(err); got != tt.reached {
				t.Errorf("Reached = %v, want %v", got, tt.reached)
			}
		})
	}
}
