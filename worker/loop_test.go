package worker_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/drainer"
	"github.com/sluice-dev/sluice/gateway"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
	"github.com/sluice-dev/sluice/worker"
)

// TestLoop runs the whole path on one embedded backend: the client submits
// to the real gateway, a real drainer delivers over gRPC to worker.Serve,
// and the handler's answers ack, retry (no sooner than it asked) and
// dead-letter.
func TestLoop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	topo := topology.Default()
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "q.db"), embeddedqueue.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.EnsureQueues(ctx, topo.Specs()); err != nil {
		t.Fatal(err)
	}

	// The gateway.
	tenants, err := tenant.Parse([]byte("tenants:\n  - {id: acme, tier: premium, api_keys: [acme-key]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	depths := depth.New(depth.Config{Backend: b, Queues: topo.Names(), Logger: quiet})
	if err := depths.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Backend: b, Topology: topo, Tenants: func() *tenant.Config { return tenants }, Depth: depths, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	auth := func() gateway.Authenticator { return tenants }
	gsrv := serve.NewServer(quiet, []grpc.UnaryServerInterceptor{gateway.UnaryAuth(auth)}, nil)
	ingestv1.RegisterIngestServiceServer(gsrv.GRPC, gw)
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, stopGateway := context.WithCancel(ctx)
	gdone := make(chan struct{})
	go func() { _ = gsrv.Serve(gctx, glis, 0); close(gdone) }()
	defer func() { stopGateway(); <-gdone }()

	// The worker: "retry" asks for a second attempt 300ms later, "poison"
	// is dead-lettered.
	type delivery struct {
		job worker.Job
		at  time.Time
	}
	var mu sync.Mutex
	deliveries := map[string][]delivery{}
	acked := make(chan string, 10)
	handler := func(_ context.Context, job worker.Job) error {
		mu.Lock()
		deliveries[string(job.Payload)] = append(deliveries[string(job.Payload)], delivery{job, time.Now()})
		mu.Unlock()
		switch {
		case string(job.Payload) == "poison":
			return worker.Permanent(errors.New("cannot parse"))
		case string(job.Payload) == "retry" && job.Attempt == 1:
			return worker.RetryAfter(errors.New("busy"), 300*time.Millisecond)
		}
		acked <- string(job.Payload)
		return nil
	}
	conn := serveWorker(t, worker.Config{Handler: handler})

	// The drainer, delivering to the worker.
	d, err := drainer.New(drainer.Config{
		Backend: b, Topology: topo, Handler: drainer.NewGRPCWorker(conn), Logger: quiet,
		Policy: sideliner.Policy{RetryBase: 50 * time.Millisecond, RetryCap: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Stop(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("stop drainer: %v", err)
		}
	}()

	c, err := client.New(glis.Addr().String(), client.Config{APIKey: "acme-key", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	results, err := c.SubmitBatch(ctx, []client.Job{{Payload: []byte("ok")}, {Payload: []byte("retry")}, {Payload: []byte("poison"), Attributes: map[string]string{"k": "v"}}})
	if err != nil {
		t.Fatal(err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for range 2 {
		select {
		case <-acked:
		case <-waitCtx.Done():
			t.Fatalf("jobs not acked in time: %v", deliveries)
		}
	}
	for d.Counts().DeadLettered == 0 {
		select {
		case <-waitCtx.Done():
			t.Fatalf("poison not dead-lettered: counts %+v", d.Counts())
		case <-time.After(20 * time.Millisecond):
		}
	}

	mu.Lock()
	defer mu.Unlock()
	for i, payload := range []string{"ok", "retry", "poison"} {
		ds := deliveries[payload]
		wantAttempts := map[string]int{"ok": 1, "retry": 2, "poison": 1}[payload]
		if len(ds) != wantAttempts {
			t.Fatalf("%s delivered %d times, want %d", payload, len(ds), wantAttempts)
		}
		j := ds[0].job
		if j.ID != results[i].JobID || j.Tenant != "acme" || j.Lane != "premium" || j.EnqueuedAt.IsZero() {
			t.Errorf("%s delivered as %+v, submitted as %+v", payload, j, results[i])
		}
	}
	if a := deliveries["poison"][0].job.Attributes["k"]; a != "v" {
		t.Errorf("poison attributes lost: %q", a)
	}
	r := deliveries["retry"]
	if gap := r[1].at.Sub(r[0].at); gap < 300*time.Millisecond || r[1].job.Attempt != 2 {
		t.Errorf("second attempt %d came %s after the first, want attempt 2 no sooner than 300ms", r[1].job.Attempt, gap)
	}
}
