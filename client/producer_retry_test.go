package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/client"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// TestProducerCallRefusalWaitsItsHint: a whole SubmitBatch call refused
// with RESOURCE_EXHAUSTED and a RetryInfo (as a rate-limiting proxy in
// front of the gateway answers) is retried after the hint, also for a job
// that has used up Config.MaxAttempts on earlier rate refusals of its own
// (which do not count against it). The call's wait was taken from the
// jobs' attempt counts alone, so such a job got no wait at all and the
// producer sent the call again at once, as long as the refusals lasted.
func TestProducerCallRefusalWaitsItsHint(t *testing.T) {
	t.Parallel()
	const perJob, callHint = 5, 150 * time.Millisecond
	s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
		switch {
		case n < perJob: // the job's own rate refusals: its attempts reach MaxAttempts
			return batchAnswer(req, quotaStatus("rate", time.Millisecond)), nil
		case n < perJob+3: // the whole call refused
			return nil, errRate(callHint)
		}
		return batchAnswer(req), nil
	}}
	serveScripted(t, s)
	p := newProducer(t, dial(t, s.addr, client.Config{MaxAttempts: perJob}), client.ProducerConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	f, err := p.Send(ctx, client.Job{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Wait(ctx)
	if err != nil {
		t.Fatalf("job: %v", err)
	}
	calls := s.recorded()
	if len(calls) != perJob+4 || res.Attempts != len(calls) {
		t.Fatalf("%d calls, %d attempts; want %d", len(calls), res.Attempts, perJob+4)
	}
	for i := perJob + 1; i < len(calls); i++ {
		if gap := calls[i].at.Sub(calls[i-1].at); gap < callHint {
			t.Errorf("call %d came %s after a call refused with a hint of %s", i, gap, callHint)
		}
	}
}

// TestProducerZeroHintBacksOff: refusals whose RetryInfo says 0 (no
// gateway sends one; a proxy might) are retried after the client's
// backoff, not at once: a Producer does not count rate refusals as
// attempts, so it sent call after call as fast as they were answered.
func TestProducerZeroHintBacksOff(t *testing.T) {
	t.Parallel()
	const refusals, base = 4, 20 * time.Millisecond
	s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
		if n < refusals {
			return batchAnswer(req, quotaStatus("rate", 0)), nil
		}
		return batchAnswer(req), nil
	}}
	serveScripted(t, s)
	p := newProducer(t, dial(t, s.addr, client.Config{BackoffBase: base, BackoffMax: base}), client.ProducerConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	f, err := p.Send(ctx, client.Job{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Wait(ctx); err != nil {
		t.Fatalf("job: %v", err)
	}
	calls := s.recorded()
	if len(calls) != refusals+1 {
		t.Fatalf("%d calls, want %d", len(calls), refusals+1)
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].at.Sub(calls[i-1].at); gap < base/2 {
			t.Errorf("call %d came %s after a refusal with a zero hint; want the backoff (at least %s)", i, gap, base/2)
		}
	}
}

// TestProducerRateRefusalsLeaveAttempts: a job refused for the tenant's
// rate (or lane backlog) as many times as Config.MaxAttempts is still
// retried after an UNAVAILABLE, whole call or its own, with the backoff:
// such refusals do not use up its attempts. They were counted once it
// failed for another reason, so a producer slowed to the tenant's rate
// failed its jobs at the first UNAVAILABLE (a gateway restarting) without
// a single retry.
func TestProducerRateRefusalsLeaveAttempts(t *testing.T) {
	t.Parallel()
	const refusals = 5 // = MaxAttempts
	tests := []struct {
		name   string
		answer func(req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error)
	}{
		{"whole call unavailable", func(*ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
			return nil, errUnavailable
		}},
		{"job unavailable", func(req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
			return batchAnswer(req, status.Convert(errUnavailable)), nil
		}},
		{"backlog, then unavailable", func(*ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
			return nil, errUnavailable
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			refusal := quotaStatus("rate", time.Millisecond)
			if strings.HasPrefix(tt.name, "backlog") {
				refusal = quotaStatus("lane_backlog", time.Millisecond)
			}
			s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
				switch {
				case n < refusals:
					return batchAnswer(req, refusal), nil
				case n == refusals:
					return tt.answer(req)
				}
				return batchAnswer(req), nil
			}}
			serveScripted(t, s)
			cfg := fastRetries
			cfg.MaxAttempts = refusals
			p := newProducer(t, dial(t, s.addr, cfg), client.ProducerConfig{})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			f, err := p.Send(ctx, client.Job{Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			res, err := f.Wait(ctx)
			if err != nil {
				t.Fatalf("job after %d rate refusals and one UNAVAILABLE: %v", refusals, err)
			}
			calls := s.recorded()
			if len(calls) != refusals+2 || res.Attempts != len(calls) {
				t.Fatalf("%d calls, %d attempts; want %d", len(calls), res.Attempts, refusals+2)
			}
			if gap := calls[refusals+1].at.Sub(calls[refusals].at); gap < fastRetries.BackoffBase/2 {
				t.Errorf("retried %s after UNAVAILABLE, want the backoff (at least %s)", gap, fastRetries.BackoffBase/2)
			}
		})
	}
}
