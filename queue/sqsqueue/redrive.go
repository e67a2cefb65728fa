package sqsqueue

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/queue"
)

var _ queue.Redriver = (*Backend)(nil)

// StartRedrive starts an SQS message move task that returns every message
// of dlq to the queue SQS redrove it from (StartMessageMoveTask without a
// destination). Messages are moved unchanged. The task runs inside SQS;
// follow it in the console or with ListMessageMoveTasks.
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
