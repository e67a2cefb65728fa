package tracing_test

import (
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-dev/sluice/internal/tracing"
)

// BenchmarkOffPerJob measures what tracing costs the gateway per job when
// it is off: the caller's context read from the metadata, the admit and
// enqueue spans (non-recording) and the envelope's headers (which the
// gateway stored before tracing too). Next to a Submit's gRPC call and
// durable enqueue (tens of microseconds at least) this is noise. On the
// shared 2-core machine, load average 11:
//
//	BenchmarkOffPerJob/traceparent-2   654756   1984 ns/op   640 B/op   11 allocs/op
//	BenchmarkOffPerJob/none-2         1000000   1029 ns/op   160 B/op    6 allocs/op
func BenchmarkOffPerJob(b *testing.B) {
	for _, bc := range []struct {
		name string
		md   metadata.MD
	}{
		{"traceparent", metadata.Pairs("authorization", "Bearer k", "traceparent", parent)},
		{"none", metadata.Pairs("authorization", "Bearer k")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tracer := tracing.Tracer(noop.NewTracerProvider())
			ctx := metadata.NewIncomingContext(b.Context(), bc.md)
			b.ReportAllocs()
			for b.Loop() {
				parent := tracing.FromIncoming(ctx)
				admitCtx, admit := tracer.Start(parent, tracing.SpanAdmit, trace.WithSpanKind(trace.SpanKindServer))
				enqueueCtx, enqueue := tracer.Start(admitCtx, tracing.SpanEnqueue, trace.WithSpanKind(trace.SpanKindProducer))
				_ = tracing.Inject(enqueueCtx)
				enqueue.End()
				admit.End()
			}
		})
	}
}
