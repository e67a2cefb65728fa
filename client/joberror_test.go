package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/client"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// TestGivenUpJobsCarryTheirKey: a job Submit or a Producer gave up on
// comes back as a *JobError with the idempotency key it was sent with
// (the client's own, when the caller gave none), so a job the gateway
// may have stored all the same can be resubmitted with it. The caller had
// only "resubmit with its key" and no key (found in a walkthrough). The
// refusal and the status stay reachable through it.
func TestGivenUpJobsCarryTheirKey(t *testing.T) {
	t.Parallel()
	s := &scripted{
		submit: answerSubmit(errUnavailable, errUnavailable, quotaStatus("rate", time.Hour).Err()),
		batch: func(context.Context, int, *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
			return nil, errUnavailable
		},
	}
	serveScripted(t, s)
	cfg := fastRetries
	cfg.MaxAttempts = 2
	c := dial(t, s.addr, cfg)

	_, err := c.Submit(t.Context(), client.Job{Payload: []byte("x")})
	var je *client.JobError
	if !errors.As(err, &je) || status.Code(err) != codes.Unavailable {
		t.Fatalf("Submit: %v (%T), want a *JobError carrying UNAVAILABLE", err, err)
	}
	if sent := s.recorded()[0].keys[0]; je.IdempotencyKey == "" || je.IdempotencyKey != sent {
		t.Fatalf("JobError key %q, want the generated key the calls carried, %q", je.IdempotencyKey, sent)
	}

	_, err = c.Submit(t.Context(), client.Job{Payload: []byte("x"), IdempotencyKey: "order-7"})
	var quota *client.QuotaError
	if !errors.As(err, &je) || je.IdempotencyKey != "order-7" || !errors.As(err, &quota) {
		t.Fatalf("Submit refused for rate: %v, want a *JobError with key order-7 around a *QuotaError", err)
	}

	p, err := c.NewProducer(client.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fut, err := p.Send(t.Context(), client.Job{Payload: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = fut.Wait(t.Context())
	if !errors.As(err, &je) || status.Code(err) != codes.Unavailable || je.IdempotencyKey == "" {
		t.Fatalf("Producer: %v (%T), want a *JobError with a key, carrying UNAVAILABLE", err, err)
	}
	if last := s.recorded(); last[len(last)-1].keys[0] != je.IdempotencyKey {
		t.Errorf("Producer's JobError key %q, want the key its calls carried, %q", je.IdempotencyKey, last[len(last)-1].keys[0])
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}
