package drainer

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/sideliner"
)

// The drainer's spans continue the trace whose context the gateway stored
// in the envelope: sluice.deliver for each attempt, sluice.move for each
// spill, backlog, requeue, retry and dead-letter, sluice.defer and
// sluice.drop (see internal/tracing for the whole tree). With tracing off
// no span is made, and the context still carries the stored one, so the
// worker gets the submitter's.

// consumerKind is made once: as an interface value each call allocated it.
var consumerKind trace.SpanStartOption = trace.WithSpanKind(trace.SpanKindConsumer)

// startDeliver starts the sluice.deliver span of one attempt at j, a child
// of the trace context in j's envelope.
func (d *Drainer) startDeliver(ctx context.Context, j *job, attempt int) (context.Context, trace.Span) {
	ctx = tracing.Extract(ctx, j.env.GetTraceContext())
	ctx, span := d.tracer.Start(ctx, tracing.SpanDeliver, consumerKind)
	if span.IsRecording() {
		span.SetAttributes(tracing.JobAttributes(j.env.GetJobId(), j.env.GetTenant(), j.q.inbox.lane.Name)...)
		span.SetAttributes(tracing.AttemptKey.Int(attempt), tracing.QueueKey.String(j.q.name))
	}
	return ctx, span
}

// endDeliver records how an attempt ended (ack, lease_lost, or the
// sideliner's action after a failure) and ends its span.
func endDeliver(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		span.SetAttributes(tracing.OutcomeKey.String(outcome))
		if err != nil {
			tracing.Fail(span, err)
		}
	}
	span.End()
}

// startSideline starts the span of a non-delivery decision: sluice.move,
// sluice.defer or sluice.drop. Its parent is the span in parent (the
// failed attempt's, for a retry or dead-letter), else the envelope's trace
// context. move adds the destination and failures.
func (d *Drainer) startSideline(parent context.Context, j *job, decision sideliner.Decision) (context.Context, trace.Span) {
	name := tracing.SpanMove
	switch decision.Action {
	case sideliner.Drop:
		name = tracing.SpanDrop
	case sideliner.Defer:
		name = tracing.SpanDefer
	}
	if !trace.SpanContextFromContext(parent).IsValid() {
		parent = tracing.Extract(parent, j.env.GetTraceContext())
	}
	ctx, span := d.tracer.Start(parent, name)
	if span.IsRecording() {
		if j.env != nil {
			span.SetAttributes(tracing.JobAttributes(j.env.GetJobId(), j.env.GetTenant(), j.q.inbox.lane.Name)...)
			span.SetAttributes(tracing.AttemptKey.Int(int(j.env.GetAttempts())))
		}
		span.SetAttributes(tracing.QueueKey.String(j.q.name), tracing.ActionKey.String(decision.Action.String()),
			tracing.ReasonKey.String(string(decision.Reason)))
		if decision.Delay > 0 {
			span.SetAttributes(tracing.DelayKey.Int64(decision.Delay.Milliseconds()))
		}
	}
	return ctx, span
}

// spanDestination notes on ctx's span where a move sends the job.
func spanDestination(ctx context.Context, dest string) {
	trace.SpanFromContext(ctx).SetAttributes(tracing.DestinationKey.String(dest))
}

// spanFail marks ctx's span as failed.
func spanFail(ctx context.Context, err error) { tracing.Fail(trace.SpanFromContext(ctx), err) }
