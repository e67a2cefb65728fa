package drainer

import (
	"context"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// GRPCWorker delivers jobs to a worker serving sluice.worker.v1.WorkerService.
type GRPCWorker struct {
	Client workerv1.WorkerServiceClient
}

// NewGRPCWorker returns a handler calling the worker over conn.
func NewGRPCWorker(conn grpc.ClientConnInterface) *GRPCWorker {
	return &GRPCWorker{Client: workerv1.NewWorkerServiceClient(conn)}
}

// Handle calls Process and classifies the returned status (see
// ClassifyWorkerStatus). The call's metadata carries job.TraceContext as
// W3C traceparent and tracestate, so a worker using otelgrpc or a W3C
// propagator continues the job's trace under the sluice.deliver span.
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
	return ClassifyWorkerStatus(err)
}

// ClassifyWorkerStatus maps a worker's gRPC status to the drainer's
// outcome:
//
//	OK                                                   ack
//	UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED,
//	ABORTED, INTERNAL, UNKNOWN, CANCELED                 retry (RetryInfo sets the least delay)
//	any other code                                       permanent: dead-letter
func ClassifyWorkerStatus(err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded,
		codes.Aborted, codes.Internal, codes.Unknown, codes.Canceled:
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				return RetryAfter(err, ri.GetRetryDelay().AsDuration())
			}
		}
		return fmt.Errorf("worker: %w", err)
	default:
		return Permanent(fmt.Errorf("worker: %w", err))
	}
}
