package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/client"
)

// The examples run against a real gateway on a loopback port, started by
// exampleGateway, whose tenants are in testTenants.

func ExampleNew() {
	// A gateway behind TLS, with a private CA and a client certificate.
	tlsConfig, err := client.LoadTLS("ca.pem", "client.pem", "client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New("sluice.example.internal:7070", client.Config{
		APIKey: "sk_live_…",
		TLS:    tlsConfig,
		// Each attempt gets 5 s; a timed-out attempt is retried.
		AttemptTimeout: 5 * time.Second,
		// Passed to grpc.NewClient, e.g. an OpenTelemetry stats handler.
		DialOptions: []grpc.DialOption{grpc.WithUserAgent("billing-service")},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

func ExampleClient_Submit() {
	addr, stop := exampleGateway()
	defer stop()

	c, err := client.New(addr, client.Config{APIKey: "acme-key", Insecure: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	job := client.Job{Payload: []byte(`{"order":42}`), Attributes: map[string]string{"kind": "invoice"}, IdempotencyKey: "order-42"}
	first, err := c.Submit(ctx, job)
	if err != nil {
		log.Fatal(err)
	}
	// The same idempotency key again: the gateway answers the first job.
	again, err := c.Submit(ctx, job)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicate:", again.Duplicate, "same job:", again.JobID == first.JobID)
	// Output:
	// duplicate: true same job: true
}

func ExampleClient_SubmitBatch() {
	addr, stop := exampleGateway()
	defer stop()
	c, err := client.New(addr, client.Config{APIKey: "acme-key", Insecure: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// More jobs than one call may carry: the client splits them.
	jobs := make([]client.Job, 1200)
	for i := range jobs {
		jobs[i] = client.Job{Payload: fmt.Appendf(nil, "event %d", i)}
	}
	jobs[7].Payload = nil // invalid: refused on its own

	results, err := c.SubmitBatch(context.Background(), jobs)
	var batchErr *client.BatchError
	if errors.As(err, &batchErr) {
		fmt.Printf("%d of %d jobs not accepted\n", batchErr.Failed, batchErr.Total)
	}
	for i, r := range results {
		if r.Err != nil {
			fmt.Printf("job %d: %v\n", i, r.Err)
		}
	}
	// Output:
	// 1 of 1200 jobs not accepted
	// job 7: invalid job: payload must not be empty
}

// A tenant over its submit rate gets a *QuotaError telling when to come
// back. The client waits such hints out itself when they are at most
// MaxRetryWait; this one asks for about 1000 s.
func ExampleQuotaError() {
	addr, stop := exampleGateway()
	defer stop()
	c, err := client.New(addr, client.Config{APIKey: "tiny-key", Insecure: true}) // 1 job, then 1 per 1000 s
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	for i := range 2 {
		_, err := c.Submit(ctx, client.Job{Payload: []byte("ping")})
		var quota *client.QuotaError
		switch {
		case errors.As(err, &quota):
			fmt.Printf("job %d: over quota %s, retry in about %s\n", i, quota.Subject, quota.RetryAfter.Round(time.Minute))
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("job %d: accepted\n", i)
		}
	}
	// Output:
	// job 0: accepted
	// job 1: over quota rate:tiny, retry in about 17m0s
}

// A tenant whose lane has too many jobs waiting for its tier gets a
// *BacklogError, which names the lane.
func ExampleBacklogError() {
	addr, stop := exampleGateway()
	defer stop()
	// The crowd tenant's lane admits 4 waiting jobs for its tier. With
	// MaxAttempts 1 the refusal comes back at once; by default the client
	// would wait the 1 s asked and try again, making up to 8 attempts in
	// all (MaxAttemptsDefault).
	c, err := client.New(addr, client.Config{APIKey: "crowd-key", Insecure: true, MaxAttempts: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for i := range 5 {
		_, err := c.Submit(context.Background(), client.Job{Payload: []byte("work")})
		var backlog *client.BacklogError
		if errors.As(err, &backlog) {
			fmt.Printf("job %d refused: lane %s has %d waiting (mark %d), retry after %s\n",
				i, backlog.Lane, backlog.Backlog, backlog.HighWaterMark, backlog.RetryAfter)
		} else if err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// job 4 refused: lane standard has 4 waiting (mark 5), retry after 1s
}

func ExampleInvalidArgumentError() {
	addr, stop := exampleGateway()
	defer stop()
	c, err := client.New(addr, client.Config{APIKey: "acme-key", Insecure: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Submit(context.Background(), client.Job{Payload: []byte("x"), TTL: time.Second, Delay: time.Minute})
	var invalid *client.InvalidArgumentError
	if errors.As(err, &invalid) {
		for _, v := range invalid.Violations {
			fmt.Println(v.Field+":", v.Description)
		}
	}
	// Every error also carries its gRPC status.
	fmt.Println(status.Code(err) == codes.InvalidArgument)
	// Output:
	// ttl: is 1s, not longer than the delay of 1m0s: the job would expire before it could run
	// true
}

// Many goroutines each send one job at a time; the producer merges their
// jobs into few SubmitBatch calls.
func ExampleProducer() {
	addr, stop := exampleGateway()
	defer stop()
	c, err := client.New(addr, client.Config{APIKey: "acme-key", Insecure: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(client.ProducerConfig{Linger: 2 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	var wg sync.WaitGroup
	var accepted atomic.Int64
	for i := range 100 {
		wg.Go(func() {
			f, err := p.Send(ctx, client.Job{Payload: fmt.Appendf(nil, "event %d", i)})
			if err != nil {
				log.Print(err) // the producer is closed, or ctx ended waiting for room
				return
			}
			if _, err := f.Wait(ctx); err != nil {
				log.Printf("event %d: %v", i, err) // a typed refusal, as Submit's
				return
			}
			accepted.Add(1)
		})
	}
	wg.Wait()
	// Close waits for whatever is still pending.
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("accepted:", accepted.Load())
	// Output:
	// accepted: 100
}
