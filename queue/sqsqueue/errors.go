package sqsqueue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sluice-dev/sluice/queue"
)

// Error codes SQS returns, in the JSON protocol's form and, where AWS's
// query-compatibility header replaces it, the legacy query form.
var (
	codesNotFound = set(
		"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue",
		"QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently",
	)
	codesReceipt = set(
		"ReceiptHandleIsInvalid", "InvalidIdFormat",
		"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight",
	)
	codesUnavailable = set(
		"RequestThrottled", "ThrottlingException", "Throttling", "ThrottledException",
		"RequestThrottledException", "TooManyRequestsException", "SlowDown",
		"KmsThrottled", "KMS.ThrottlingException",
		"ServiceUnavailable", "InternalError", "InternalFailure", "RequestTimeout",
		"RequestTimeoutException", "OverLimit",
	)
	codesBatchTooLarge = set(
		"TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
	)
	codesBodyTooLarge = set(
		"BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong",
	)
	codesInvalid = set(
		"InvalidParameterValue", "InvalidParameterValueException", "MissingParameter",
		"InvalidAttributeName", "InvalidAttributeValue", "InvalidMessageContents",
		"EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest",
		"BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
		"InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId",
		"UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation",
		"ValidationError", "ValidationException",
	)
)

func mentionsReceipt(message string) bool {
	m := strings.ToLower(message)
	return strings.Contains(m, "receipt handle") || strings.Contains(m, "receipthandle")
}

func set(codes ...string) map[string]bool {
	m := make(map[string]bool, len(codes))
	for _, c := range codes {
		m[c] = true
	}
	return m
}

// sentinelFor maps an SQS error code and message (of a whole call or of one
// batch entry) to the queue error it means, or nil when it has no queue
// meaning. senderFault is used for codes not listed: a fault of the server
// is ErrUnavailable.
func sentinelFor(code, message string, senderFault bool) error {
	switch {
	case codesNotFound[code]:
		return queue.ErrQueueNotFound
	case codesReceipt[code]:
		return queue.ErrReceiptInvalid
	case codesUnavailable[code]:
		return queue.ErrUnavailable
	case codesBatchTooLarge[code]:
		return queue.ErrBatchTooLarge
	case codesBodyTooLarge[code]:
		return queue.ErrBodyTooLarge
	case codesInvalid[code] && mentionsReceipt(message):
		// AWS answers a receipt handle of an earlier receive with
		// InvalidParameterValue "… ReceiptHandle is invalid. Reason: The
		// receipt handle has expired."
		return queue.ErrReceiptInvalid
	case codesInvalid[code]:
		return queue.ErrInvalidArgument
	case !senderFault:
		return queue.ErrUnavailable
	}
	return nil
}

// translate turns an error from an SDK call into one wrapping a queue
// sentinel (STYLE rule 3), keeping the SDK error in the chain for its text.
// ctx is the caller's context: when it is done, its error is returned (or
// ErrClosed when Close ended the call); a deadline of the backend's own
// per-call timeout is ErrUnavailable.
func (b *Backend) translate(ctx context.Context, op, queueName string, err error) error {
	if err == nil {
		return nil
	}
	prefix := "sqs " + op
	if queueName != "" {
		prefix += " " + queueName
	}
	if b.closed.Load() && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("%s: %w", prefix, queue.ErrClosed)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", prefix, ctxErr)
	}
	if s := classify(err); s != nil {
		return fmt.Errorf("%s: %w: %w", prefix, s, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// classify returns the queue sentinel for an SDK error, or nil.
func classify(err error) error {
	// Typed errors first: their ErrorCode may carry the query-protocol code.
	var (
		notFound      *types.QueueDoesNotExist
		receipt       *types.ReceiptHandleIsInvalid
		notInflight   *types.MessageNotInflight
		throttled     *types.RequestThrottled
		kmsThrottled  *types.KmsThrottled
		tooMany       *types.TooManyEntriesInBatchRequest
		tooLong       *types.BatchRequestTooLong
		invalidFormat *types.InvalidIdFormat
		noTask        *types.ResourceNotFoundException // of a message move task
	)
	switch {
	case errors.As(err, &notFound):
		return queue.ErrQueueNotFound
	case errors.As(err, &receipt), errors.As(err, &notInflight), errors.As(err, &invalidFormat):
		return queue.ErrReceiptInvalid
	case errors.As(err, &throttled), errors.As(err, &kmsThrottled):
		return queue.ErrUnavailable
	case errors.As(err, &tooMany):
		return queue.ErrBatchTooLarge
	case errors.As(err, &tooLong):
		return queue.ErrBodyTooLarge
	case errors.As(err, &noTask):
		return queue.ErrTaskNotFound
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		if s := sentinelFor(apiErr.ErrorCode(), apiErr.ErrorMessage(), apiErr.ErrorFault() != smithy.FaultServer); s != nil {
			return s
		}
	}
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) && (respErr.HTTPStatusCode() >= 500 || respErr.HTTPStatusCode() == 429) {
		return queue.ErrUnavailable
	}
	if apiErr != nil {
		// An API error not listed above (access denied, bad credentials, …):
		// not retryable and not a queue condition; keep it plain.
		return nil
	}
	// No response: the request could not be sent or the connection failed,
	// or the per-call timeout passed.
	var sendErr *smithyhttp.RequestSendError
	var netErr net.Error
	if errors.As(err, &sendErr) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return queue.ErrUnavailable
	}
	return nil
}
