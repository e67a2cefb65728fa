package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// ScopeName is the instrumentation scope of sluice's spans.
const ScopeName = "github.com/sluice-dev/sluice"

// Span names (see the package comment for the tree they form).
const (
	SpanAdmit   = "sluice.admit"
	SpanEnqueue = "sluice.enqueue"
	SpanMove    = "sluice.move"
	SpanDefer   = "sluice.defer"
	SpanDeliver = "sluice.deliver"
	SpanReplay  = "sluice.replay"
	SpanDrop    = "sluice.drop"
)

// Attribute keys of sluice's spans.
const (
	JobIDKey  = attribute.Key("sluice.job_id")
	TenantKey = attribute.Key("sluice.tenant")
	LaneKey   = attribute.Key("sluice.lane")
	// AttemptKey is, on sluice.deliver, the attempt (1 is the first; a
	// replay starts counting again); on a move, the attempts made so far.
	AttemptKey = attribute.Key("sluice.attempt")
	// QueueKey is the queue the job is read from, or for sluice.enqueue
	// the shard queue it is sent to.
	QueueKey = attribute.Key("sluice.queue")
	// DestinationKey is the queue a move or replay sends the job to.
	DestinationKey = attribute.Key("sluice.destination")
	// ActionKey is the sideliner's action of a move: spill, backlog,
	// requeue, retry or dead_letter.
	ActionKey = attribute.Key("sluice.action")
	// ReasonKey is the sideliner's reason, e.g. read_ahead_full, stale,
	// permanent_failure: ….
	ReasonKey = attribute.Key("sluice.reason")
	// OutcomeKey is how a span's step ended: for sluice.admit the submit
	// outcome of the metrics (admitted, duplicate, invalid,
	// throttled_rate, …); for sluice.deliver ack, retry, dead_letter,
	// drop or lease_lost.
	OutcomeKey = attribute.Key("sluice.outcome")
	// DelayKey is the delay in milliseconds of a retry, requeue or defer.
	DelayKey = attribute.Key("sluice.delay_ms")
	// ReplayIDKey names the replay of a sluice.replay span.
	ReplayIDKey = attribute.Key("sluice.replay_id")
)

// JobAttributes are the attributes every span of a job carries.
func JobAttributes(jobID, tenant, lane string) []attribute.KeyValue {
	return []attribute.KeyValue{JobIDKey.String(jobID), TenantKey.String(tenant), LaneKey.String(lane)}
}

// Fail marks span as failed with err.
func Fail(span trace.Span, err error) {
	if span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// w3c is the only format sluice stores and forwards: the envelope's
// trace_context holds W3C traceparent and tracestate.
var w3c propagation.TraceContext

// Inject returns the span context of ctx as W3C trace headers
// (traceparent, and tracestate when there is one), the form the envelope
// stores; nil when ctx has no valid span context.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c
}

// Extract returns ctx with the span context in headers (as Inject returns
// them) as its remote parent. Missing or malformed headers leave ctx as it
// is, so a job with none starts a new trace.
func Extract(ctx context.Context, headers map[string]string) context.Context {
	if headers["traceparent"] == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier(headers))
}

// FromIncoming returns ctx with the caller's trace context, read from the
// gRPC call's metadata (traceparent, tracestate), as its remote parent. A
// ctx that already carries a span context (a stats handler such as
// otelgrpc's made a server span) is returned as it is.
func FromIncoming(ctx context.Context) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	// Two lookups rather than FromIncomingContext, which copies all the
	// metadata.
	tp := metadata.ValueFromIncomingContext(ctx, "traceparent")
	if len(tp) == 0 {
		return ctx
	}
	c := headerPair{traceparent: tp[0]}
	if ts := metadata.ValueFromIncomingContext(ctx, "tracestate"); len(ts) > 0 {
		c.tracestate = ts[0]
	}
	return w3c.Extract(ctx, &c)
}

// AppendOutgoing adds W3C trace headers (as Inject returns them) to ctx's
// outgoing gRPC metadata, so a gRPC server using otelgrpc or a W3C
// propagator continues the trace.
func AppendOutgoing(ctx context.Context, headers map[string]string) context.Context {
	kv := make([]string, 0, 4)
	for _, k := range w3c.Fields() {
		if v := headers[k]; v != "" {
			kv = append(kv, k, v)
		}
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// headerPair is a TextMapCarrier of the two W3C trace headers.
type headerPair struct{ traceparent, tracestate string }

func (c *headerPair) Get(key string) string {
	switch key {
	case "traceparent":
		return c.traceparent
	case "tracestate":
		return c.tracestate
	}
	return ""
}

func (c *headerPair) Set(key, value string) {
	switch key {
	case "traceparent":
		c.traceparent = value
	case "tracestate":
		c.tracestate = value
	}
}

func (c *headerPair) Keys() []string { return []string{"traceparent", "tracestate"} }
