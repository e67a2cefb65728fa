package sqsqueue

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/queue"
)

// TestSentinelFor covers codes the emulator never returns but AWS does.
func TestSentinelFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code, message string
		senderFault   bool
		want          error
	}{
		{"QueueDoesNotExist", "", true, queue.ErrQueueNotFound},
		{"AWS.SimpleQueueService.NonExistentQueue", "", true, queue.ErrQueueNotFound},
		{"ReceiptHandleIsInvalid", "The input receipt handle is invalid.", true, queue.ErrReceiptInvalid},
		{"InvalidParameterValue", "Value AQEB for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", true, queue.ErrReceiptInvalid},
		{"InvalidParameterValue", "Value AQEB for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", true, queue.ErrReceiptInvalid},
		{"InvalidParameterValue", "Message must be shorter than 1024 bytes.", true, queue.ErrInvalidArgument},
		{"AWS.SimpleQueueService.MessageNotInflight", "", true, queue.ErrReceiptInvalid},
		{"RequestThrottled", "", true, queue.ErrUnavailable},
		{"KmsThrottled", "", true, queue.ErrUnavailable},
		{"InternalError", "", false, queue.ErrUnavailable},
		{"SomethingNew", "", false, queue.ErrUnavailable},
		{"SomethingNew", "", true, nil},
		{"BatchRequestTooLong", "", true, queue.ErrBodyTooLarge},
		{"TooManyEntriesInBatchRequest", "", true, queue.ErrBatchTooLarge},
		{"BatchEntryIdsNotDistinct", "", true, queue.ErrInvalidArgument},
	}
	for _, tt := range tests {
		got := sentinelFor(tt.code, tt.message, tt.senderFault)
		if !errors.Is(got, tt.want) || (tt.want == nil && got != nil) {
			t.Errorf("sentinelFor(%q, %q, %t) = %v, want %v", tt.code, tt.message, tt.senderFault, got, tt.want)
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	t.Parallel()
	for give, want := range map[string]int32{"0s": 0, "-1s": 0, "1ns": 1, "1s": 1, "1.5s": 2, "30s": 30, "12h": 43200} {
		d, err := time.ParseDuration(give)
		if err != nil {
			t.Fatal(err)
		}
		if got := ceilSeconds(d); got != want {
			t.Errorf("ceilSeconds(%s) = %d, want %d", give, got, want)
		}
	}
}

// TestClassifyMoveTaskNotFound: SQS answers CancelMessageMoveTask for a
// handle of no running task with ResourceNotFoundException, which the
// shared classification makes ErrTaskNotFound (CancelRedrive checked for
// it on its own before).
func TestClassifyMoveTaskNotFound(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("operation error SQS: CancelMessageMoveTask: %w", &types.ResourceNotFoundException{Message: aws.String("Task does not exist")})
	if got := classify(err); !errors.Is(got, queue.ErrTaskNotFound) {
		t.Fatalf("classify(%v) = %v, want ErrTaskNotFound", err, got)
	}
}
