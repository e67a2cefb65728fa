package testcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/worker"
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

// Answer decides a call's answer after the worker's service time: nil
// acknowledges the job, an error fails the attempt. call counts the job's
// calls from 1.
type Answer func(ctx context.Context, req *workerv1.ProcessRequest, call int) error

// Worker is a real gRPC worker (sluice.worker.v1.WorkerService) on a
// loopback port. It records each job's first delivery, its last request
// and its calls and acknowledgements, spends its service time on each
// call (so that drainer concurrency × service time is the system's
// delivery capacity), then answers as its Answer says.
type Worker struct {
	workerv1.UnimplementedWorkerServiceServer
	Addr string

	answer    Answer
	srv       *grpc.Server
	service   atomic.Int64  // nanoseconds per call
	spread    atomic.Uint64 // math.Float64bits of the relative spread of service times
	perTenant sync.Map      // tenant → time.Duration: its own service time

	mu         sync.Mutex
	jobs       map[string]*jobRecord
	deliveries []Delivery
	repeats    int   // calls of jobs seen before
	calls      int64 // every call
	changed    chan struct{}
}

type jobRecord struct {
	last         *workerv1.ProcessRequest
	calls, acked int
}

// StartWorker serves a worker on 127.0.0.1 until Stop, with the server
// options given (TLS credentials, say). A nil answer acknowledges every
// job.
func StartWorker(answer Answer, opts ...grpc.ServerOption) (*Worker, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("worker listener: %w", err)
	}
	w := &Worker{Addr: lis.Addr().String(), answer: answer, srv: grpc.NewServer(opts...), jobs: map[string]*jobRecord{}, changed: make(chan struct{}, 1)}
	workerv1.RegisterWorkerServiceServer(w.srv, w)
	go func() { _ = w.srv.Serve(lis) }()
	return w, nil
}

// Stop ends the server, cutting calls in flight.
func (w *Worker) Stop() { w.srv.Stop() }

// SetService sets the time each call takes.
func (w *Worker) SetService(d time.Duration) { w.service.Store(int64(d)) }

// SetServiceSpread makes each call's service time vary uniformly within
// ± f of its mean (0 ≤ f < 1), as real jobs' times do; 0, the default,
// makes every call take exactly its service time.
func (w *Worker) SetServiceSpread(f float64) { w.spread.Store(math.Float64bits(f)) }

// SetTenantService sets the time each call of one tenant's jobs takes,
// overriding SetService for that tenant.
func (w *Worker) SetTenantService(tenant string, d time.Duration) { w.perTenant.Store(tenant, d) }

// Reset forgets every job recorded so far and the tenants' service times.
func (w *Worker) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.jobs = map[string]*jobRecord{}
	w.deliveries = nil
	w.repeats = 0
	w.perTenant.Clear()
}

// Process records the call, waits for the service time and answers.
func (w *Worker) Process(ctx context.Context, req *workerv1.ProcessRequest) (*workerv1.ProcessResponse, error) {
	start := time.Now()
	id := req.GetJobId()
	idx := -1
	w.mu.Lock()
	w.calls++
	j := w.jobs[id]
	if j == nil {
		j = &jobRecord{}
		w.jobs[id] = j
		idx = len(w.deliveries)
		w.deliveries = append(w.deliveries, Delivery{JobID: id, Tenant: req.GetTenant(), Enqueued: req.GetEnqueuedAt().AsTime(), Start: start})
	} else {
		w.repeats++
	}
	j.last = req
	j.calls++
	call := j.calls
	w.mu.Unlock()
	if err := w.serve(ctx, req.GetTenant()); err != nil {
		return nil, err
	}
	var err error
	if w.answer != nil {
		err = w.answer(ctx, req, call)
	}
	w.mu.Lock()
	// Reset may have replaced the records meanwhile.
	if idx >= 0 && idx < len(w.deliveries) && w.deliveries[idx].JobID == id {
		w.deliveries[idx].Took = time.Since(start)
	}
	if err == nil && w.jobs[id] == j {
		j.acked++
	}
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return &workerv1.ProcessResponse{}, nil
}

// Pull runs the worker as pull workers too: one worker.Connect session to
// each of addrs, with key and concurrency credits, recording and answering
// each job as Process does, until stop is called.
func (w *Worker) Pull(addrs []string, key string, concurrency int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Go(func() {
			_ = worker.Connect(ctx, addr, key, func(ctx context.Context, j worker.Job) error {
				_, err := w.Process(ctx, &workerv1.ProcessRequest{
					JobId: j.ID, Tenant: j.Tenant, Payload: j.Payload, Attributes: j.Attributes, Attempt: uint32(j.Attempt),
					EnqueuedAt: timestamppb.New(j.EnqueuedAt), Lane: j.Lane,
				})
				return worker.FromStatus(err)
			}, worker.ConnectOptions{Concurrency: concurrency, Logger: quiet, DrainTimeout: 5 * time.Second})
		})
	}
	return func() { cancel(); wg.Wait() }
}

// serve waits for the call's service time.
func (w *Worker) serve(ctx context.Context, tenant string) error {
	d := time.Duration(w.service.Load())
	if v, ok := w.perTenant.Load(tenant); ok {
		d = v.(time.Duration)
	}
	if f := math.Float64frombits(w.spread.Load()); f > 0 {
		d = time.Duration(float64(d) * (1 + f*(2*rand.Float64()-1)))
	}
	if d > 0 && !periodic.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// Count returns the number of distinct jobs delivered.
func (w *Worker) Count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.deliveries)
}

// Deliveries returns a copy of the first deliveries recorded, in order of
// arrival, and the number of repeated deliveries.
func (w *Worker) Deliveries() ([]Delivery, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Delivery(nil), w.deliveries...), w.repeats
}

// Acked returns the acknowledgements per job id, and the payload of each
// job's last call.
func (w *Worker) Acked() (acked map[string]int, payloads map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	acked, payloads = map[string]int{}, make(map[string]string, len(w.jobs))
	for id, j := range w.jobs {
		if j.acked > 0 {
			acked[id] = j.acked
		}
		payloads[id] = string(j.last.GetPayload())
	}
	return acked, payloads
}

// Job returns the last request of a job, or nil.
func (w *Worker) Job(id string) *workerv1.ProcessRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	if j := w.jobs[id]; j != nil {
		return j.last
	}
	return nil
}

// Calls is the number of Process calls so far.
func (w *Worker) Calls() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// Delivered reports whether the job has been acknowledged.
func (w *Worker) Delivered(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	j := w.jobs[id]
	return j != nil && j.acked > 0
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

// WaitDelivered waits up to timeout until every id has been acknowledged.
func (w *Worker) WaitDelivered(ctx context.Context, ids []string, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		missing := 0
		for _, id := range ids {
			if !w.Delivered(id) {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-w.changed:
		case <-time.After(100 * time.Millisecond):
		case <-deadline.C:
			return fmt.Errorf("%d of %d jobs not delivered within %s", missing, len(ids), timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
