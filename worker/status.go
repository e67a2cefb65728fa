package worker

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The worker protocol's status table, declared once. A worker answers
// Process with a status; the drainer reads it back with FromStatus:
//
//	OK                                   ack: the job is deleted
//	UNAVAILABLE, RESOURCE_EXHAUSTED,
//	DEADLINE_EXCEEDED, ABORTED, INTERNAL,
//	UNKNOWN, CANCELED                    retry later with backoff
//	any other code                       permanent: dead-letter
//
// A google.rpc.RetryInfo detail on a retryable status sets the least delay
// before the next attempt. worker.proto documents the same table for
// workers in other languages; a test checks the two agree.
var retryable = map[codes.Code]bool{
	codes.Unavailable:       true,
	codes.ResourceExhausted: true,
	codes.DeadlineExceeded:  true,
	codes.Aborted:           true,
	codes.Internal:          true,
	codes.Unknown:           true,
	codes.Canceled:          true,
}

// Retryable reports whether a worker's status code asks for a retry; any
// other code but OK dead-letters the job.
func Retryable(c codes.Code) bool { return retryable[c] }

// ToStatus maps a handler's error to the status a worker answers: nil stays
// nil, Permanent is FAILED_PRECONDITION, anything else UNAVAILABLE, with a
// RetryInfo for RetryAfter. A status inside err is not passed on, so a
// NOT_FOUND from a service the handler called does not dead-letter the job
// by accident.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	// A status with details is sent as a google.rpc.Status, whose message
	// must be UTF-8: with an error that was not, gRPC dropped the details
	// and a RetryAfter's delay with them. A long one broke the connection.
	msg := errorText(err)
	var perm *PermanentError
	if errors.As(err, &perm) {
		return status.Error(codes.FailedPrecondition, msg)
	}
	st := status.New(codes.Unavailable, msg)
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		if ds, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(ra.After)}); derr == nil {
			st = ds
		}
	}
	return st.Err()
}

// FromStatus maps the status a worker answered (an error from the Process
// call) back to a handler error: nil for OK, RetryAfter for a retryable
// status with a RetryInfo, a plain error for any other retryable status,
// Permanent for the rest. The inverse of ToStatus.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	if !Retryable(st.Code()) {
		return Permanent(fmt.Errorf("worker: %w", err))
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return RetryAfter(fmt.Errorf("worker: %w", err), ri.GetRetryDelay().AsDuration())
		}
	}
	return fmt.Errorf("worker: %w", err)
}
