package sqsqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/queue"
)

var _ queue.Redriver = (*Backend)(nil)

// StartRedrive starts an SQS message move task that returns every message
// of dlq to the queue SQS redrove it from (StartMessageMoveTask without a
// destination). Messages are moved unchanged. The task runs inside SQS;
// follow it with ListRedrives, stop it with CancelRedrive.
func (b *Backend) StartRedrive(ctx context.Context, dlq string, maxPerSecond int) (string, error) {
	if err := b.errIfClosed("redrive"); err != nil {
		return "", err
	}
	if maxPerSecond < 0 || maxPerSecond > 500 {
		return "", fmt.Errorf("redrive %s: %w: %d messages per second, want 0 to 500", dlq, queue.ErrInvalidArgument, maxPerSecond)
	}
	arn, err := b.queueARN(ctx, dlq)
	if err != nil {
		return "", err
	}
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(arn)}
	if maxPerSecond > 0 {
		in.MaxNumberOfMessagesPerSecond = aws.Int32(int32(maxPerSecond))
	}
	cctx, cancel := b.callCtx(ctx, 0)
	defer cancel()
	out, err := b.client.StartMessageMoveTask(cctx, in, b.count(opStartMessageMoveTask))
	if err != nil {
		return "", b.translate(ctx, "start message move task", dlq, err)
	}
	return aws.ToString(out.TaskHandle), nil
}

// ListRedrives returns dlq's recent message move tasks, newest first
// (ListMessageMoveTasks on its ARN: SQS keeps up to 10, of the last 14
// days). Only a running task carries its handle.
func (b *Backend) ListRedrives(ctx context.Context, dlq string) ([]queue.RedriveTask, error) {
	if err := b.errIfClosed("list redrives"); err != nil {
		return nil, err
	}
	arn, err := b.queueARN(ctx, dlq)
	if err != nil {
		return nil, err
	}
	cctx, cancel := b.callCtx(ctx, 0)
	defer cancel()
	out, err := b.client.ListMessageMoveTasks(cctx, &sqs.ListMessageMoveTasksInput{
		SourceArn:  aws.String(arn),
		MaxResults: aws.Int32(10),
	}, b.count(opListMessageMoveTasks))
	if err != nil {
		return nil, b.translate(ctx, "list message move tasks", dlq, err)
	}
	tasks := make([]queue.RedriveTask, 0, len(out.Results))
	for _, r := range out.Results {
		t := queue.RedriveTask{
			Task:          aws.ToString(r.TaskHandle),
			Status:        queue.RedriveStatus(aws.ToString(r.Status)),
			Moved:         r.ApproximateNumberOfMessagesMoved,
			ToMove:        aws.ToInt64(r.ApproximateNumberOfMessagesToMove),
			MaxPerSecond:  int(aws.ToInt32(r.MaxNumberOfMessagesPerSecond)),
			FailureReason: aws.ToString(r.FailureReason),
		}
		if r.StartedTimestamp > 0 {
			t.Started = time.UnixMilli(r.StartedTimestamp)
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// CancelRedrive cancels the running message move task with handle task
// (CancelMessageMoveTask). SQS answers ResourceNotFoundException for a
// handle of no running task, which is ErrTaskNotFound; a malformed handle
// is ErrInvalidArgument.
func (b *Backend) CancelRedrive(ctx context.Context, task string) (int64, error) {
	if err := b.errIfClosed("cancel redrive"); err != nil {
		return 0, err
	}
	if task == "" {
		return 0, fmt.Errorf("cancel redrive: %w: no task handle", queue.ErrInvalidArgument)
	}
	cctx, cancel := b.callCtx(ctx, 0)
	defer cancel()
	out, err := b.client.CancelMessageMoveTask(cctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(task)}, b.count(opCancelMessageMoveTask))
	if err != nil {
		return 0, b.translate(ctx, "cancel message move task", "", err)
	}
	return out.ApproximateNumberOfMessagesMoved, nil
}
