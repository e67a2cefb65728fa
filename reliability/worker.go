package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
)

// Worker is a real gRPC worker (sluice.worker.v1.WorkerService) on a
// loopback port. It records every job it acknowledges and fails jobs as
// their kind (in the payload, see Ledger) asks: poison jobs are refused
// permanently (INVALID_ARGUMENT, so the drainer dead-letters them), doomed
// ones always fail with UNAVAILABLE (retried until the attempts run out),
// flaky ones fail their first attempt only.
type Worker struct {
	workerv1.UnimplementedWorkerServiceServer
	// Addr is the worker's address.
	Addr string
	// MaxDelay is the longest a job is held before the answer (a random
	// share of it), so deliveries are in flight when a process is killed.
	MaxDelay time.Duration

	srv *grpc.Server

	mu        sync.Mutex
	acked     map[string]int    // job id → OK answers
	payloads  map[string]string // job id → payload
	calls     map[string]int    // job id → Process calls
	totalCall int64
	changed   chan struct{}
}

// StartWorker serves a worker on a free loopback port until Stop.
func StartWorker(maxDelay time.Duration) (*Worker, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("worker listener: %w", err)
	}
	w := &Worker{
		Addr: lis.Addr().String(), MaxDelay: maxDelay, srv: grpc.NewServer(),
		acked: map[string]int{}, payloads: map[string]string{}, calls: map[string]int{}, changed: make(chan struct{}, 1),
	}
	workerv1.RegisterWorkerServiceServer(w.srv, w)
	go func() { _ = w.srv.Serve(lis) }()
	return w, nil
}

// Stop ends the server, cutting calls in flight.
func (w *Worker) Stop() { w.srv.Stop() }

// Process handles one delivery.
func (w *Worker) Process(ctx context.Context, req *workerv1.ProcessRequest) (*workerv1.ProcessResponse, error) {
	if w.MaxDelay > 0 {
		select {
		case <-time.After(rand.N(w.MaxDelay)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	id, payload := req.GetJobId(), string(req.GetPayload())
	_, kind, _ := ParsePayload(payload)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.totalCall++
	w.calls[id]++
	w.payloads[id] = payload
	switch {
	case kind == KindPoison:
		return nil, status.Error(codes.InvalidArgument, "poison job: refused for good")
	case kind == KindDoomed:
		return nil, status.Error(codes.Unavailable, "doomed job: fails every attempt")
	case kind == KindFlaky && w.calls[id] == 1:
		return nil, status.Error(codes.Unavailable, "flaky job: first attempt fails")
	}
	w.acked[id]++
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return &workerv1.ProcessResponse{}, nil
}

// Deliveries returns a copy of the acknowledged deliveries (job id →
// count) and of the payload seen per job id.
func (w *Worker) Deliveries() (acked map[string]int, payloads map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	acked = make(map[string]int, len(w.acked))
	for k, v := range w.acked {
		acked[k] = v
	}
	payloads = make(map[string]string, len(w.payloads))
	for k, v := range w.payloads {
		payloads[k] = v
	}
	return acked, payloads
}

// Calls is the number of Process calls so far.
func (w *Worker) Calls() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.totalCall
}

// Delivered reports whether the job has been acknowledged.
func (w *Worker) Delivered(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked[id] > 0
}

// Changed is signalled (without blocking) after each acknowledgement.
func (w *Worker) Changed() <-chan struct{} { return w.changed }
