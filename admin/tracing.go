package admin

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/internal/tracing"
)

// moveBackTraced is moveBack inside a sluice.replay span, a child of the
// envelope's trace context, so that a replayed job's later spans stay in
// its trace. The admin API has no Config: its spans go to the global
// provider, the one internal/tracing sets up.
func (p *replayer) moveBackTraced(ctx context.Context, replayID string, m *dlqMessage) error {
	ctx = tracing.Extract(ctx, m.env.GetTraceContext())
	ctx, span := tracing.Tracer(nil).Start(ctx, tracing.SpanReplay)
	defer span.End()
	if span.IsRecording() {
		if m.env != nil {
			span.SetAttributes(tracing.JobAttributes(m.env.GetJobId(), m.env.GetTenant(), m.env.GetLane())...)
			span.SetAttributes(tracing.AttemptKey.Int(int(m.env.GetAttempts())))
		}
		span.SetAttributes(tracing.ReplayIDKey.String(replayID), tracing.QueueKey.String(m.queue), tracing.ReasonKey.String(reasonOf(m)))
	}
	err := p.moveBack(ctx, m)
	if err != nil {
		tracing.Fail(span, err)
	}
	return err
}

// spanDestination notes on ctx's span where a replay sends the job.
func spanDestination(ctx context.Context, dest string) {
	trace.SpanFromContext(ctx).SetAttributes(tracing.DestinationKey.String(dest))
}
