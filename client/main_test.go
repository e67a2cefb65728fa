package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/gateway"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Tenants of the test gateway: acme (premium, ample rate), tiny (one job,
// then about one per 1000 s) and crowd (standard tier on a lane whose
// high-water mark is 5 jobs: its threshold of 80% admits 4) and bursty
// (100 jobs at once, then 1000 a second); open is not limited (for the
// benchmarks).
const testTenants = `tenants:
  - {id: acme, tier: premium, api_keys: [acme-key]}
  - {id: tiny, tier: free, api_keys: [tiny-key], submit_burst: 1, submit_rate: 0.001}
  - {id: crowd, tier: standard, api_keys: [crowd-key]}
  - {id: bursty, tier: premium, api_keys: [bursty-key], submit_burst: 100, submit_rate: 1000}
  - {id: open, tier: premium, api_keys: [open-key], submit_burst: 10000000, submit_rate: 10000000}
`

// startGateway serves the real gateway, over the embedded backend in a
// temporary directory, on a loopback port. It returns the address and a
// func that stops it and removes the directory.
func startGateway() (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "sluice-client-test")
	if err != nil {
		return "", nil, err
	}
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		os.RemoveAll(dir)
	}
	fail := func(err error) (string, func(), error) { stop(); return "", nil, err }

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	topo := topology.Topology{Lanes: []topology.Lane{
		{Name: "premium", Weight: 6},
		{Name: "standard", Weight: 3, HighWaterMark: 5},
		{Name: "free", Weight: 1},
	}}.WithDefaults()
	b, err := embeddedqueue.Open(filepath.Join(dir, "q.db"), embeddedqueue.Options{Logger: log})
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { b.Close() })
	ctx := context.Background()
	if err := b.EnsureQueues(ctx, topo.Specs()); err != nil {
		return fail(err)
	}
	tenants, err := tenant.Parse([]byte(testTenants))
	if err != nil {
		return fail(err)
	}
	depths := depth.New(depth.Config{Backend: b, Queues: topo.Names(), Logger: log})
	if err := depths.Refresh(ctx); err != nil {
		return fail(err)
	}
	gw, err := gateway.New(gateway.Config{Backend: b, Topology: topo, Tenants: func() *tenant.Config { return tenants }, Depth: depths, Logger: log})
	if err != nil {
		return fail(err)
	}
	auth := func() gateway.Authenticator { return tenants }
	srv := serve.NewServer(log, []grpc.UnaryServerInterceptor{gateway.UnaryAuth(auth)}, []grpc.StreamServerInterceptor{gateway.StreamAuth(auth)})
	ingestv1.RegisterIngestServiceServer(srv.GRPC, gw)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, lis, 0); close(done) }()
	undo = append(undo, func() { cancel(); <-done })
	return lis.Addr().String(), stop, nil
}

// gatewayAddr starts a gateway for t.
func gatewayAddr(t *testing.T) string {
	t.Helper()
	addr, stop, err := startGateway()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// exampleGateway starts a gateway for an example.
func exampleGateway() (addr string, stop func()) {
	addr, stop, err := startGateway()
	if err != nil {
		panic(fmt.Sprintf("start gateway: %v", err))
	}
	return addr, stop
}
