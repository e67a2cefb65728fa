package console

import (
	"io"
	"net"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestSplitServesGRPCAndHTTPOnOnePort serves a gRPC server and an HTTP
// server on one listener, and reaches both; a PipeListener serves the
// same gRPC server in process.
func TestSplitServesGRPCAndHTTPOnOnePort(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, h := Split(lis)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(g) }()
	pipe := NewPipeListener()
	go func() { _ = srv.Serve(pipe) }()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "console") })}
	go func() { _ = hs.Serve(h) }()
	t.Cleanup(func() { srv.Stop(); _ = hs.Close() })

	for _, tc := range []struct {
		name string
		opts []grpc.DialOption
		addr string
	}{
		{"tcp", nil, lis.Addr().String()},
		{"pipe", []grpc.DialOption{grpc.WithContextDialer(pipe.Dial)}, "passthrough:///in-process"},
	} {
		conn, err := grpc.NewClient(tc.addr, append(tc.opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		_ = conn.Close()
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("gRPC over %s: %v, %v", tc.name, resp, err)
		}
	}
	for range 3 { // several connections, each routed
		resp, err := http.Get("http://" + lis.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(body) != "console" {
			t.Fatalf("HTTP got %q", body)
		}
	}
	// Closing one side closes the listener: the other's Accept ends.
	_ = g.Close()
	if _, err := h.Accept(); err == nil {
		t.Fatal("Accept after Close succeeded")
	}
}
