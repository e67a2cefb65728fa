package sqsqueue_test

import (
	"testing"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/queuetest"
)

// TestConformance runs the suite every backend passes against the local
// SQS-compatible server, unchanged and with no case skipped.
func TestConformance(t *testing.T) {
	queuetest.Exercise(t.Context(), t, func(t *testing.T) queue.Backend {
		return newBackend(t)
	})
}

// BenchmarkBackend runs the shared backend benchmarks on the local server
// and logs the API calls each one made (sends at concurrency 64 share
// SendMessageBatch calls through the linger).
func BenchmarkBackend(b *testing.B) {
	queuetest.Benchmark(b, func(b *testing.B) queue.Backend {
		be := newBackend(b)
		b.Cleanup(func() { b.Logf("N=%d API calls: %v", b.N, be.APICalls()) })
		return be
	})
}
