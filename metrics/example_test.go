package metrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/metrics"
)

func Example() {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.Options{TopTenants: 20})

	// The gateway records each Submit and each enqueue.
	m.Submit("acme", "premium", "premium", metrics.OutcomeAdmitted)
	m.EnqueueLatency("premium", 2*time.Millisecond)
	// The drainer records what it did, and first-attempt ages.
	m.AgeOfFirstAttempt("premium", 1500*time.Millisecond)
	m.Drain("premium", metrics.ActionDelivered, "within_limits")

	// Both binaries serve the registry on /metrics.
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(reg))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "sluice_jobs_submitted_total{") || strings.HasPrefix(line, "sluice_drain_actions_total{") {
			fmt.Print(line)
		}
	}
	// Output:
	// sluice_drain_actions_total{action="delivered",lane="premium",reason="within_limits"} 1
	// sluice_jobs_submitted_total{lane="premium",outcome="admitted",tenant="acme",tier="premium"} 1
}

func ExampleMetrics_nil() {
	var m *metrics.Metrics // metrics off: every method is a no-op
	m.Submit("acme", "premium", "premium", metrics.OutcomeAdmitted)
	fmt.Println("ok")
	// Output: ok
}
