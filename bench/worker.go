package bench

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
)

// Delivery is one job's first delivery as the worker saw it.
type Delivery struct {
	JobID    string
	Tenant   string
	Enqueued time.Time     // accepted by the gateway (ProcessRequest.enqueued_at)
	Start    time.Time     // the worker's clock when Process was entered
	Took     time.Duration // worker time the call used; 0 while under way
}

// Dwell is the time from acceptance to the start of delivery.
func (d Delivery) Dwell() time.Duration { return d.Start.Sub(d.Enqueued) }

// Worker is a real gRPC worker (sluice.worker.v1.WorkerService) on a
// loopback port. It records the first delivery of each job and spends
// its service time on each call, so that drainer concurrency × service
// time is the system's delivery capacity.
type Worker struct {
	workerv1.UnimplementedWorkerServiceServer
	Addr string

	service atomic.Int64 // nanoseconds per call
	total   atomic.Int64 // calls, repeats included

	perTenant sync.Map // tenant → time.Duration: its own service time

	mu         sync.Mutex
	seen       map[string]struct{}
	deliveries []Delivery
	repeats    int

	srv *grpc.Server
}

// StartWorker serves a worker on 127.0.0.1 until Stop.
func StartWorker() (*Worker, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("worker listener: %w", err)
	}
	w := &Worker{Addr: lis.Addr().String(), seen: map[string]struct{}{}, srv: grpc.NewServer()}
	workerv1.RegisterWorkerServiceServer(w.srv, w)
	go func() { _ = w.srv.Serve(lis) }()
	return w, nil
}

// Stop stops serving.
func (w *Worker) Stop() { w.srv.Stop() }

// SetService sets the time each call takes.
func (w *Worker) SetService(d time.Duration) { w.service.Store(int64(d)) }

// SetTenantService sets the time each call of one tenant's jobs takes,
// overriding SetService for that tenant.
func (w *Worker) SetTenantService(tenant string, d time.Duration) { w.perTenant.Store(tenant, d) }

// Reset forgets every delivery recorded so far.
func (w *Worker) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = map[string]struct{}{}
	w.deliveries = nil
	w.repeats = 0
	w.perTenant.Clear()
}

// Process records the delivery and waits for the service time.
func (w *Worker) Process(ctx context.Context, req *workerv1.ProcessRequest) (*workerv1.ProcessResponse, error) {
	start := time.Now()
	w.total.Add(1)
	idx := -1
	w.mu.Lock()
	if _, dup := w.seen[req.GetJobId()]; dup {
		w.repeats++
	} else {
		w.seen[req.GetJobId()] = struct{}{}
		idx = len(w.deliveries)
		w.deliveries = append(w.deliveries, Delivery{JobID: req.GetJobId(), Tenant: req.GetTenant(), Enqueued: req.GetEnqueuedAt().AsTime(), Start: start})
	}
	w.mu.Unlock()
	d := time.Duration(w.service.Load())
	if v, ok := w.perTenant.Load(req.GetTenant()); ok {
		d = v.(time.Duration)
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if idx >= 0 {
		w.mu.Lock()
		// Reset may have replaced the slice meanwhile.
		if idx < len(w.deliveries) && w.deliveries[idx].JobID == req.GetJobId() {
			w.deliveries[idx].Took = time.Since(start)
		}
		w.mu.Unlock()
	}
	return &workerv1.ProcessResponse{}, nil
}

// Count returns the number of distinct jobs delivered.
func (w *Worker) Count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.deliveries)
}

// Deliveries returns a copy of the deliveries recorded, in order of
// arrival, and the number of repeated deliveries.
func (w *Worker) Deliveries() ([]Delivery, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Delivery(nil), w.deliveries...), w.repeats
}

// WaitCount waits until at least n distinct jobs have been delivered, or
// timeout; it reports whether they were.
func (w *Worker) WaitCount(ctx context.Context, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for w.Count() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
