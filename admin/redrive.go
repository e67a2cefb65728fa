package admin

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/queue"
)

// maxTaskHandle bounds CancelRedrive's task: SQS handles are a few hundred
// bytes.
const maxTaskHandle = 4096

// errNoMoveTasks answers the move-task RPCs on a backend without them.
var errNoMoveTasks = status.Error(codes.FailedPrecondition, "this backend has no native whole-queue redrive, so no redrive tasks; use ReplayDLQ (sluicectl dlq replay --all-tenants) and follow it with sluicectl dlq status")

var redriveStatuses = map[queue.RedriveStatus]adminv1.RedriveTask_Status{
	queue.RedriveRunning:    adminv1.RedriveTask_STATUS_RUNNING,
	queue.RedriveCompleted:  adminv1.RedriveTask_STATUS_COMPLETED,
	queue.RedriveCancelling: adminv1.RedriveTask_STATUS_CANCELLING,
	queue.RedriveCancelled:  adminv1.RedriveTask_STATUS_CANCELLED,
	queue.RedriveFailed:     adminv1.RedriveTask_STATUS_FAILED,
}

// ListRedrives lists the move tasks of a lane's DLQ, newest first.
func (a *Server) ListRedrives(ctx context.Context, req *adminv1.ListRedrivesRequest) (*adminv1.ListRedrivesResponse, error) {
	if _, ok := a.topology.Lane(req.GetLane()); !ok {
		return nil, badRequest([]*errdetails.BadRequest_FieldViolation{violation("lane", "%s", unknownLane(a.topology, req.GetLane()))})
	}
	redriver, ok := a.backend.(queue.Redriver)
	if !ok {
		return nil, errNoMoveTasks
	}
	dlq := a.topology.DLQ(req.GetLane())
	tasks, err := redriver.ListRedrives(ctx, dlq)
	if err != nil {
		return nil, moveTaskError("list redrives of "+dlq, "sqs:ListMessageMoveTasks and sqs:GetQueueAttributes", err)
	}
	resp := &adminv1.ListRedrivesResponse{Dlq: dlq, Tasks: make([]*adminv1.RedriveTask, len(tasks))}
	for i, t := range tasks {
		rt := &adminv1.RedriveTask{
			Task:          t.Task,
			Status:        redriveStatuses[t.Status],
			Moved:         t.Moved,
			ToMove:        t.ToMove,
			MaxPerSecond:  int32(t.MaxPerSecond), //nolint:gosec // SQS caps it at 500
			FailureReason: t.FailureReason,
		}
		if !t.Started.IsZero() {
			rt.StartedAt = timestamppb.New(t.Started)
		}
		resp.Tasks[i] = rt
	}
	return resp, nil
}

// CancelRedrive stops a running move task by its handle.
func (a *Server) CancelRedrive(ctx context.Context, req *adminv1.CancelRedriveRequest) (*adminv1.CancelRedriveResponse, error) {
	task := req.GetTask()
	switch {
	case task == "":
		return nil, badRequest([]*errdetails.BadRequest_FieldViolation{violation("task", "is required: the handle RedriveDLQ answered, or ListRedrives lists for a running task")})
	case len(task) > maxTaskHandle:
		return nil, badRequest([]*errdetails.BadRequest_FieldViolation{violation("task", "is %d bytes, longer than any task handle (%d)", len(task), maxTaskHandle)})
	}
	redriver, ok := a.backend.(queue.Redriver)
	if !ok {
		return nil, errNoMoveTasks
	}
	moved, err := redriver.CancelRedrive(ctx, task)
	switch {
	case errors.Is(err, queue.ErrTaskNotFound):
		return nil, status.Errorf(codes.NotFound, "cancel redrive: %v (it has finished or was cancelled, or the handle is wrong: sluicectl dlq redrive --lane L --status lists the lane's tasks)", err)
	case errors.Is(err, queue.ErrInvalidArgument):
		return nil, badRequest([]*errdetails.BadRequest_FieldViolation{violation("task", "is not the handle of a running redrive task: %v (sluicectl dlq redrive --lane L --status shows the handle of a running one)", err)})
	case err != nil:
		return nil, moveTaskError("cancel redrive", "sqs:CancelMessageMoveTask", err)
	}
	a.log.InfoContext(ctx, "DLQ redrive cancelled", slog.String("task", task), slog.Int64("moved", moved))
	return &adminv1.CancelRedriveResponse{Task: task, Moved: moved}, nil
}
