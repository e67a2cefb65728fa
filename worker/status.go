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
//
// The error reads "worker: <the worker's message> (<code>)": a job's last
// error, as the DLQ shows it, leads with what the worker said. It read
// "worker: rpc error: code = FailedPrecondition desc = …", which a listing
// cut before the message (found in a walkthrough). status.Code and
// status.FromError still find the worker's status in it.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	werr := &statusError{st: st, err: err}
	if !Retryable(st.Code()) {
		return Permanent(werr)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return RetryAfter(werr, ri.GetRetryDelay().AsDuration())
		}
	}
	return werr
}

// statusError is a worker's answer (err, the Process call's error, with
// its status st) as a handler error.
type statusError struct {
	st  *status.Status
	err error
}

func (e *statusError) Error() string {
	return fmt.Sprintf("worker: %s (%s)", e.st.Message(), e.st.Code())
}

// GRPCStatus returns the worker's status.
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the Process call's error.
func (e *statusError) Unwrap() error { return e.err }
