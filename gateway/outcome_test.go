package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/faultqueue"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/metricstest"
	"github.com/sluice-dev/sluice/queue"
)

// TestRepeatInBatchCountsItsFirstsOutcome sends a batch in which a key
// repeats after its first job was refused for the tenant's rate: the
// repeat is refused the same way and is counted as throttled, as its
// first is, not as a backend failure.
func TestRepeatInBatchCountsItsFirstsOutcome(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	tb := setupWith(t, Config{Metrics: metrics.New(reg, metrics.Options{})})
	const burst = 3 // tiny's
	var jobs []*ingestv1.SubmitRequest
	for i := range burst {
		jobs = append(jobs, &ingestv1.SubmitRequest{Payload: []byte("x"), IdempotencyKey: fmt.Sprint("k", i)})
	}
	jobs = append(jobs,
		&ingestv1.SubmitRequest{Payload: []byte("x"), IdempotencyKey: "over"},
		&ingestv1.SubmitRequest{Payload: []byte("x"), IdempotencyKey: "over"})
	resp, err := tb.client.SubmitBatch(key(t.Context(), "tiny-key-1"), &ingestv1.SubmitBatchRequest{Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.GetResults()[burst:] {
		if c := codes.Code(r.GetError().GetCode()); c != codes.ResourceExhausted {
			t.Fatalf("job %d past the burst: %v, want RESOURCE_EXHAUSTED", burst+i, r)
		}
	}
	for outcome, want := range map[string]float64{
		metrics.OutcomeAdmitted:      burst,
		metrics.OutcomeThrottledRate: 2,
		metrics.OutcomeUnavailable:   0,
	} {
		if got := metricstest.CounterSum(t, reg, metrics.NameJobsSubmitted, map[string]string{"outcome": outcome}); got != want {
			t.Errorf("%s{outcome=%q} = %g, want %g", metrics.NameJobsSubmitted, outcome, got, want)
		}
	}
}

// TestCallerGoneIsNotABackendFailure: a caller whose context ends while
// its job is being stored (its deadline, or a cancel) was counted as
// outcome "unavailable", the page-worthy backend failure, and logged as
// one. It is counted "canceled", and the job is not stored.
func TestCallerGoneIsNotABackendFailure(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	entered := make(chan struct{}, 1)
	tb := setupWrapped(t, Config{Metrics: metrics.New(reg, metrics.Options{})}, func(b queue.Backend) queue.Backend {
		fq := faultqueue.New(b)
		fq.Inject(func(c faultqueue.Call) error {
			if c.Op != faultqueue.OpSend {
				return nil
			}
			entered <- struct{}{}
			<-c.Ctx.Done() // the send outlasts its caller
			return c.Ctx.Err()
		})
		return fq
	})
	ctx, cancel := context.WithCancel(key(t.Context(), "acme-key-1"))
	go func() {
		<-entered
		cancel()
	}()
	_, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("x")})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("Submit = %v, want CANCELED", err)
	}
	for outcome, want := range map[string]float64{
		metrics.OutcomeCanceled:    1,
		metrics.OutcomeUnavailable: 0,
	} {
		// The handler counts after the client has its answer: wait a
		// little for it.
		deadline := time.Now().Add(10 * time.Second)
		got := metricstest.CounterSum(t, reg, metrics.NameJobsSubmitted, map[string]string{"outcome": outcome})
		for got != want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			got = metricstest.CounterSum(t, reg, metrics.NameJobsSubmitted, map[string]string{"outcome": outcome})
		}
		if got != want {
			t.Errorf("%s{outcome=%q} = %g, want %g", metrics.NameJobsSubmitted, outcome, got, want)
		}
	}
}

// TestBatchRefusedWholeIsCounted: a SubmitBatch refused as a whole (no
// jobs, or more than MaxBatchJobs) was answered INVALID_ARGUMENT and
// counted nowhere. It counts once as invalid.
func TestBatchRefusedWholeIsCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	tb := setupWith(t, Config{Metrics: metrics.New(reg, metrics.Options{})})
	tooMany := make([]*ingestv1.SubmitRequest, MaxBatchJobs+1)
	for i := range tooMany {
		tooMany[i] = &ingestv1.SubmitRequest{Payload: []byte("x")}
	}
	for _, jobs := range [][]*ingestv1.SubmitRequest{nil, tooMany} {
		if _, err := tb.client.SubmitBatch(key(t.Context(), "acme-key-1"), &ingestv1.SubmitBatchRequest{Jobs: jobs}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("batch of %d: %v, want INVALID_ARGUMENT", len(jobs), err)
		}
	}
	if got := metricstest.CounterSum(t, reg, metrics.NameJobsSubmitted, map[string]string{"outcome": metrics.OutcomeInvalid}); got != 2 {
		t.Fatalf("%s{outcome=invalid} = %g, want 2", metrics.NameJobsSubmitted, got)
	}
}
