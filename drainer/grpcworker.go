package drainer

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/worker"
)

// GRPCWorker delivers jobs to a worker serving sluice.worker.v1.WorkerService.
type GRPCWorker struct {
	Client workerv1.WorkerServiceClient
}

// NewGRPCWorker returns a handler calling the worker over conn.
func NewGRPCWorker(conn grpc.ClientConnInterface) *GRPCWorker {
	return &GRPCWorker{Client: workerv1.NewWorkerServiceClient(conn)}
}

// Handle calls Process and classifies the returned status with
// worker.FromStatus, which holds the protocol's status table. The call's
// metadata carries job.TraceContext as W3C traceparent and tracestate, so
// a worker using otelgrpc or a W3C propagator continues the job's trace
// under the sluice.deliver span.
func (w *GRPCWorker) Handle(ctx context.Context, job *Job) error {
	ctx = tracing.AppendOutgoing(ctx, job.TraceContext)
	_, err := w.Client.Process(ctx, &workerv1.ProcessRequest{
		JobId:      job.ID,
		Tenant:     job.Tenant,
		Payload:    job.Payload,
		Attributes: job.Attributes,
		Attempt:    uint32(job.Attempt),
		EnqueuedAt: timestamppb.New(job.EnqueuedAt),
		Lane:       job.Lane,
	})
	return worker.FromStatus(err)
}
