package gateway

import (
	"testing"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// BenchmarkSubmit measures unary Submits through a real gRPC server on
// loopback and the whole admission path (auth, validation, bucket, router,
// durable enqueue on the embedded backend), from parallel callers:
//
//	go test -run '^$' -bench Submit -cpu 2 ./gateway/
func BenchmarkSubmit(b *testing.B) {
	tb := setup(b)
	ctx := key(b.Context(), "bench-key-1")
	payload := make([]byte, 200)
	b.SetParallelism(32) // 64 callers with -cpu 2: group commit needs company
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: payload}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
}
