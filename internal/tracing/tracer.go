package tracing

import (
	"context"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracer returns sluice's tracer from tp, or from the global provider
// when tp is nil; when tracing is off (tp nil and no global provider set
// up, or a no-op provider), a tracer that makes no spans at all (see
// offTracer).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if _, ok := tp.(noop.TracerProvider); ok || isUnsetGlobal(tp) {
		return offTracer{}
	}
	return tp.Tracer(ScopeName)
}

// isUnsetGlobal reports whether tp is OpenTelemetry's global provider
// before otel.SetTracerProvider: it would record nothing, unless a
// provider were set later (the binaries set theirs up first).
func isUnsetGlobal(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

// offTracer makes no spans: Start returns the caller's context as it is,
// so that a job still carries the trace context it came with (the
// gateway stores the submitter's, the drainer hands the stored one to the
// worker), and a span that does nothing. The global provider's tracer
// would allocate a non-recording span and a context for each of a job's
// spans: two as it is admitted, one or more as it is delivered.
type offTracer struct{ noop.Tracer }

// offSpan is boxed once: converting noop.Span to an interface allocates.
var offSpan trace.Span = noop.Span{}

func (offTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	return ctx, offSpan
}
