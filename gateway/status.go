package gateway

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/queue"
)

func badRequest(v violations) *status.Status {
	msg := "invalid job"
	if len(v) > 0 {
		msg = "invalid job: " + v[0].GetField() + " " + v[0].GetDescription()
	}
	return withDetails(status.New(codes.InvalidArgument, msg), &errdetails.BadRequest{FieldViolations: v})
}

func invalidArgument(v violations) error { return badRequest(v).Err() }

// quotaDetails adds to a RESOURCE_EXHAUSTED status the QuotaFailure naming
// subject (as "rate:acme") and the RetryInfo that says when to retry.
func quotaDetails(st *status.Status, subject string, retry time.Duration) *status.Status {
	return withDetails(st,
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     subject,
			Description: st.Message(),
		}}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
	)
}

// unavailableRetry is the RetryInfo delay of an UNAVAILABLE answer (the
// backend could not store the job). It had none, and clients that retry
// at once spun against a full disk (found by a tester); the Go client
// backs off on its own, and ignores it.
const unavailableRetry = time.Second

// unavailableRetryInfo is unavailableRetry's RetryInfo, encoded once: a
// batch refused whole has one status per job.
var unavailableRetryInfo = func() *anypb.Any {
	a, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(unavailableRetry)})
	if err != nil {
		panic(err)
	}
	return a
}()

// unavailable maps a backend failure. The job was not stored: the client
// should retry with the same idempotency key, after unavailableRetry.
func unavailable(err error) *status.Status {
	msg := fmt.Sprintf("job not stored: %v", err)
	if errors.Is(err, queue.ErrBodyTooLarge) || errors.Is(err, queue.ErrInvalidArgument) {
		return status.New(codes.InvalidArgument, msg)
	}
	return status.FromProto(&spb.Status{Code: int32(codes.Unavailable), Message: msg, Details: []*anypb.Any{unavailableRetryInfo}})
}

func withDetails(st *status.Status, details ...protoadapt.MessageV1) *status.Status {
	ds, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return ds
}

// jobError turns a per-job refusal into the batch result form. A quota
// refusal's retry delay comes from r, not from status details: encoding
// them into Any messages only to decode them again here was about two
// fifths of the CPU of a refused job.
func (r *result) jobError() *ingestv1.JobError {
	je := &ingestv1.JobError{Code: uint32(r.err.Code()), Message: r.err.Message()}
	switch {
	case r.quotaSubject != "":
		je.RetryDelay = durationpb.New(r.retry)
		je.QuotaSubject = r.quotaSubject
		return je
	case r.err.Code() == codes.Unavailable:
		je.RetryDelay = durationpb.New(unavailableRetry)
		return je
	}
	for _, d := range r.err.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			je.RetryDelay = d.GetRetryDelay()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				je.FieldViolations = append(je.FieldViolations, &ingestv1.FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return je
}
