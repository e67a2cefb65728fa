package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/queue"
)

// TestRedriveErrorSaysWhetherToRetry: every failed redrive was answered
// UNAVAILABLE, which sluicectl prints as "try again"; a local SQS server
// without message move tasks ("Unknown action: StartMessageMoveTask")
// got that advice forever. Only an unreachable or throttled backend is
// worth a retry.
func TestRedriveErrorSaysWhetherToRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		code codes.Code
		says string
	}{
		{"throttled", fmt.Errorf("sqs start message move task d: %w: throttled", queue.ErrUnavailable), codes.Unavailable, "throttled"},
		{"timed out", fmt.Errorf("sqs start message move task d: %w", context.DeadlineExceeded), codes.Unavailable, "deadline"},
		{"no DLQ", fmt.Errorf("sqs get queue attributes d: %w", queue.ErrQueueNotFound), codes.FailedPrecondition, "--create-queues"},
		{"unknown action", errors.New("sqs start message move task d: api error InvalidAction: Unknown action: StartMessageMoveTask"), codes.FailedPrecondition, "dlq replay"},
		{"access denied", errors.New("sqs start message move task d: api error AccessDenied: not authorized"), codes.FailedPrecondition, "sqs:StartMessageMoveTask"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := status.Convert(redriveError("sluice-std-dlq", tc.err))
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.says) || !strings.Contains(st.Message(), "sluice-std-dlq") {
				t.Fatalf("%v: %s %q, want %s naming the DLQ and saying %q", tc.err, st.Code(), st.Message(), tc.code, tc.says)
			}
		})
	}
}
