package gateway

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/metricstest"
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
