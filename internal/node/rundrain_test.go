package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/drainer"
	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

// TestRunDrainShutdownWithinGrace: SIGTERM (ctx's end) with an admin call
// still open and a delivery still running ends RunDrain within one
// --shutdown-grace. The admin server used to drain its calls for the
// whole grace first, with the drainers still polling and delivering,
// and only then did the drainers get a grace of their own: a stop took
// twice the grace, past what an orchestrator waits before SIGKILL.
func TestRunDrainShutdownWithinGrace(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second // long enough that a loaded machine stays well inside 1.5× it; the old order took 2×
	topo := topology.Default()
	backend, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "queues.db"), embeddedqueue.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	if err := backend.EnsureQueues(t.Context(), topo.Specs()); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	body, err := envelope.Encode(&envelope.Envelope{JobId: "j1", Tenant: "acme", Payload: []byte("x"), EnqueuedAt: timestamppb.New(now), ExpiresAt: timestamppb.New(now.Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Send(t.Context(), &queue.SendParams{Queue: topo.ShardQueue("standard", 0), Entries: []queue.SendEntry{{ID: "1", Body: body}}}); err != nil {
		t.Fatal(err)
	}
	noTenants, err := tenant.Parse([]byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	handler := drainer.HandlerFunc(func(ctx context.Context, _ *drainer.Job) error {
		started <- struct{}{}
		<-ctx.Done() // a delivery that runs until it is cut
		return ctx.Err()
	})
	adminAddr := make(chan string, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- RunDrain(ctx, DrainConfig{
			Backend: backend, Topology: topo, Handler: handler, HandlerTimeout: time.Hour,
			Tenants: tenant.Fixed(noTenants), Concurrency: 4, SidelineShare: 10,
			Metrics: metrics.New(nil, metrics.Options{}), AdminListen: "127.0.0.1:0", AdminKey: "admin-key-1",
			ShutdownGrace: grace, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Console: func(_ context.Context, lis net.Listener, _ *grpc.Server) (net.Listener, func(), error) {
				adminAddr <- lis.Addr().String()
				return lis, func() {}, nil
			},
		})
	}()
	var addr string
	select {
	case addr = <-adminAddr:
	case err := <-done:
		t.Fatalf("RunDrain: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the admin listener did not open within 10s")
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not delivered within 10s")
	}
	// An admin call that stays open: a health watch, as a load balancer's
	// client-side health checking keeps.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}

	stopAt := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * grace):
		t.Fatal("RunDrain did not return within 10 × the grace")
	}
	if took := time.Since(stopAt); took > grace*3/2 {
		t.Errorf("RunDrain stopped in %s, want about the grace (%s)", took.Round(time.Millisecond), grace)
	}
}
