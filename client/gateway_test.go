package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/client"
)

// These tests run the client against the real gateway.

func newClient(t *testing.T, addr, key string, cfg client.Config) *client.Client {
	t.Helper()
	cfg.APIKey, cfg.Insecure = key, true
	c, err := client.New(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestGatewaySubmitAndDuplicate(t *testing.T) {
	t.Parallel()
	c := newClient(t, gatewayAddr(t), "acme-key", client.Config{})
	first, err := c.Submit(t.Context(), client.Job{Payload: []byte("hello"), Attributes: map[string]string{"kind": "greeting"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if first.JobID == "" || first.Duplicate || first.Attempts != 1 || first.IdempotencyKey == "" {
		t.Fatalf("first submit: %+v", first)
	}
	again, err := c.Submit(t.Context(), client.Job{Payload: []byte("hello"), IdempotencyKey: first.IdempotencyKey})
	if err != nil {
		t.Fatal(err)
	}
	if again.JobID != first.JobID || !again.Duplicate {
		t.Fatalf("repeat with key %q: %+v, want duplicate of %s", first.IdempotencyKey, again, first.JobID)
	}
	other, err := c.Submit(t.Context(), client.Job{Payload: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if other.JobID == first.JobID || other.IdempotencyKey == first.IdempotencyKey {
		t.Fatalf("a second job without a key got %+v, like the first %+v", other, first)
	}
}

// TestGatewayBatchSplits sends more jobs than one call may carry; one of
// them is invalid and must be the only one refused.
func TestGatewayBatchSplits(t *testing.T) {
	t.Parallel()
	c := newClient(t, gatewayAddr(t), "acme-key", client.Config{})
	jobs := make([]client.Job, 1100)
	for i := range jobs {
		jobs[i] = client.Job{Payload: fmt.Appendf(nil, "job %d", i)}
	}
	const bad = 777
	jobs[bad].Payload = nil
	results, err := c.SubmitBatch(t.Context(), jobs)
	var be *client.BatchError
	if !errors.As(err, &be) || be.Failed != 1 || be.Total != len(jobs) {
		t.Fatalf("err = %v, want a BatchError with 1 of %d failed", err, len(jobs))
	}
	ids := map[string]bool{}
	for i, r := range results {
		if i == bad {
			var inv *client.InvalidArgumentError
			if !errors.As(r.Err, &inv) || len(inv.Violations) != 1 || inv.Violations[0].Field != "payload" || r.JobID != "" {
				t.Errorf("job %d: %+v, want an InvalidArgumentError on payload", i, r)
			}
			continue
		}
		if r.Err != nil || r.JobID == "" || r.Attempts != 1 {
			t.Fatalf("job %d: %+v", i, r)
		}
		ids[r.JobID] = true
	}
	if len(ids) != len(jobs)-1 {
		t.Fatalf("%d distinct job ids, want %d", len(ids), len(jobs)-1)
	}
}

func TestGatewayRefusals(t *testing.T) {
	t.Parallel()
	addr := gatewayAddr(t)
	// MaxRetryWait below the gateway's hints (≥ 1 s) returns refusals at once.
	cfg := client.Config{MaxRetryWait: 10 * time.Millisecond}
	ctx := t.Context()

	tiny := newClient(t, addr, "tiny-key", cfg)
	if _, err := tiny.Submit(ctx, client.Job{Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	_, err := tiny.Submit(ctx, client.Job{Payload: []byte("second")})
	var quota *client.QuotaError
	if !errors.As(err, &quota) || quota.Subject != "rate:tiny" || quota.RetryAfter < 10*time.Second || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over rate: %v (%+v), want a QuotaError on rate:tiny with a long RetryAfter", err, quota)
	}
	results, err := tiny.SubmitBatch(ctx, []client.Job{{Payload: []byte("a")}, {Payload: []byte("b")}})
	for i, r := range results {
		var q *client.QuotaError
		if !errors.As(r.Err, &q) || q.Subject != "rate:tiny" || q.RetryAfter < 10*time.Second || r.JobID != "" {
			t.Errorf("batch job %d over rate: %+v, want a QuotaError", i, r)
		}
	}
	if !errors.As(err, &quota) {
		t.Errorf("batch error %v does not expose the QuotaError", err)
	}

	crowd := newClient(t, addr, "crowd-key", cfg)
	for i := range 4 {
		if _, err := crowd.Submit(ctx, client.Job{Payload: []byte("fill")}); err != nil {
			t.Fatalf("job %d below the lane's mark: %v", i, err)
		}
	}
	_, err = crowd.Submit(ctx, client.Job{Payload: []byte("one too many")})
	var backlog *client.BacklogError
	if !errors.As(err, &backlog) || errors.As(err, &quota) {
		t.Fatalf("over the mark: %v, want a BacklogError only", err)
	}
	want := client.BacklogError{Subject: "lane_backlog:crowd", Lane: "standard", Tier: "standard", Backlog: 4, HighWaterMark: 5}
	if backlog.Subject != want.Subject || backlog.Lane != want.Lane || backlog.Tier != want.Tier ||
		backlog.Backlog != want.Backlog || backlog.HighWaterMark != want.HighWaterMark || backlog.RetryAfter < time.Second {
		t.Fatalf("backlog error %+v, want %+v and RetryAfter ≥ 1s", backlog, want)
	}
	results, _ = crowd.SubmitBatch(ctx, []client.Job{{Payload: []byte("x")}})
	if !errors.As(results[0].Err, &backlog) || backlog.Lane != "standard" || backlog.Subject != "lane_backlog:crowd" {
		t.Fatalf("batch over the mark: %+v, want a BacklogError with the subject and the lane read from the message", results[0])
	}

	acme := newClient(t, addr, "acme-key", cfg)
	_, err = acme.Submit(ctx, client.Job{Payload: []byte("x"), TTL: time.Second, Delay: time.Minute})
	var inv *client.InvalidArgumentError
	if !errors.As(err, &inv) || len(inv.Violations) != 1 || inv.Violations[0].Field != "ttl" {
		t.Fatalf("ttl shorter than delay: %v, want an InvalidArgumentError on ttl", err)
	}

	nobody := newClient(t, addr, "no-such-key", cfg)
	if _, err := nobody.Submit(ctx, client.Job{Payload: []byte("x")}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unknown key: %v, want UNAUTHENTICATED", err)
	}
}

// TestGatewayBatchPacesRate sends a batch far over the tenant's burst: the
// jobs refused for rate are retried, paced by the gateway's hints, until
// all are accepted.
func TestGatewayBatchPacesRate(t *testing.T) {
	t.Parallel()
	c := newClient(t, gatewayAddr(t), "bursty-key", client.Config{})
	jobs := make([]client.Job, 300)
	for i := range jobs {
		jobs[i] = client.Job{Payload: []byte("x")}
	}
	start := time.Now()
	results, err := c.SubmitBatch(t.Context(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	retried, most := 0, 0
	for _, r := range results {
		if r.Attempts > 1 {
			retried++
		}
		most = max(most, r.Attempts)
	}
	// 200 jobs over the burst of 100 need 200 ms of tokens at 1000/s.
	if took := time.Since(start); retried < 200 || took < 200*time.Millisecond {
		t.Fatalf("%d jobs retried in %s, want ≥ 200 and ≥ 200ms", retried, took)
	}
	t.Logf("300 jobs, burst 100, 1000/s: %d retried, at most %d attempts, %s", retried, most, time.Since(start).Round(time.Millisecond))
}
