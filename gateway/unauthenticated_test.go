package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/metricstest"
)

// TestUnauthenticatedSubmitsAreCounted: metrics/doc.go and the README list
// outcome="unauthenticated" among the Submit outcomes, counted as tenant
// "other", but the gateway refused such calls from their headers and
// counted nothing: a client with a revoked key, or a fleet with a stale
// one, did not show up in sluice_jobs_submitted_total at all.
func TestUnauthenticatedSubmitsAreCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	tb := setupWith(t, Config{Metrics: metrics.New(reg, metrics.Options{})})
	calls := []struct {
		name string
		call func() error
	}{
		{"Submit without a key", func() error {
			_, err := tb.client.Submit(t.Context(), &ingestv1.SubmitRequest{Payload: []byte("x")})
			return err
		}},
		{"Submit with an unknown key", func() error {
			_, err := tb.client.Submit(key(t.Context(), "nope-nope"), &ingestv1.SubmitRequest{Payload: []byte("x")})
			return err
		}},
		{"SubmitBatch with an unknown key", func() error {
			_, err := tb.client.SubmitBatch(key(t.Context(), "nope-nope"), &ingestv1.SubmitBatchRequest{
				Jobs: []*ingestv1.SubmitRequest{{Payload: []byte("x")}, {Payload: []byte("y")}},
			})
			return err
		}},
	}
	for _, c := range calls {
		if err := c.call(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: %v, want UNAUTHENTICATED", c.name, err)
		}
	}
	// Health needs no key and is no Submit.
	if _, err := tb.health.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"outcome": metrics.OutcomeUnauthenticated, "tenant": metrics.OtherValue}
	if got := metricstest.CounterSum(t, reg, metrics.NameJobsSubmitted, want); got != float64(len(calls)) {
		t.Errorf("%s%v = %g, want %d (one per refused call)", metrics.NameJobsSubmitted, want, got, len(calls))
	}
	if got := metricstest.CounterSum(t, reg, metrics.NameJobsSubmitted, nil); got != float64(len(calls)) {
		t.Errorf("%s = %g in all, want only the %d refused calls", metrics.NameJobsSubmitted, got, len(calls))
	}
}
