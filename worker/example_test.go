package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/worker"
)

// A worker process: run it, then start the gateway with
// --worker-addr 127.0.0.1:7080.
func ExampleListenAndServe() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := worker.ListenAndServe(ctx, "127.0.0.1:7080", worker.Config{
		Handler: func(ctx context.Context, job worker.Job) error {
			log.Printf("job %s from %s: %q", job.ID, job.Tenant, job.Payload)
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The handler's error decides the job's fate. Here a drainer's call is
// made by hand to show the status each answer becomes.
func ExampleServe() {
	handler := func(ctx context.Context, job worker.Job) error {
		switch string(job.Payload) {
		case "not yet":
			return worker.RetryAfter(errors.New("downstream busy"), 30*time.Second)
		case "garbage":
			return worker.Permanent(errors.New("cannot parse payload"))
		}
		return nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- worker.Serve(ctx, lis, worker.Config{Handler: handler}) }()
	defer func() { cancel(); <-served }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	drainer := workerv1.NewWorkerServiceClient(conn)
	for _, payload := range []string{"hello", "not yet", "garbage"} {
		_, err := drainer.Process(context.Background(), &workerv1.ProcessRequest{JobId: "01J", Tenant: "acme", Payload: []byte(payload), Attempt: 1})
		fmt.Printf("%-8s → %s\n", payload, status.Code(err))
	}
	// Output:
	// hello    → OK
	// not yet  → Unavailable
	// garbage  → FailedPrecondition
}

// A pull worker: it dials sluice (the gateway's --worker-listen) with a
// worker key and runs up to 16 jobs at once. On SIGTERM it asks for no
// more jobs, finishes and acks the ones it runs, and returns.
func ExampleConnect() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := worker.Connect(ctx, "127.0.0.1:7072", "sk_worker_…", func(ctx context.Context, job worker.Job) error {
		log.Printf("job %s from %s: %q", job.ID, job.Tenant, job.Payload)
		return nil // or worker.RetryAfter(err, d), worker.Permanent(err)
	}, worker.ConnectOptions{Concurrency: 16})
	if err != nil {
		log.Fatal(err)
	}
}
