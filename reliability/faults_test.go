package reliability

import (
	"testing"
	"time"
)

// TestBackendFaults is the short version of the fault run: seconds of
// each fault between the binaries and the SQS-compatible server.
func TestBackendFaults(t *testing.T) {
	t.Parallel()
	res, err := RunFaults(t.Context(), testEnv(t), FaultConfig{
		Phase: time.Second, Rate: 100, Callers: 16, Concurrency: 8, DrainTimeout: 90 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("faults injected %v over %d requests; Submit answers %v (p99 %s, max %s); %d acked, %d delivered, %d dead-lettered, %d lost, %d duplicates; drainers %v; drain %s",
		res.Injected, res.Requests, res.Load.Codes, res.P99, res.Max, res.Acked, res.Delivered, res.DeadLettered, res.Lost, res.Duplicates, res.Drainers, res.Drain)
	if res.Acked == 0 {
		t.Fatal("no job was acknowledged")
	}
	for _, p := range res.Problems {
		t.Error(p)
	}
}
