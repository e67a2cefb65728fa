package gateway

import (
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
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

func quotaExceeded(tenant, subject, description string, retry time.Duration) *status.Status {
	return withDetails(status.New(codes.ResourceExhausted, description),
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     subject + ":" + tenant,
			Description: description,
		}}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
	)
}

// unavailable maps a backend failure. The job was not stored: the client
// should retry with the same idempotency key.
func unavailable(err error) *status.Status {
	code := codes.Unavailable
	if errors.Is(err, queue.ErrBodyTooLarge) || errors.Is(err, queue.ErrInvalidArgument) {
		code = codes.InvalidArgument
	}
	return status.Newf(code, "job not stored: %v", err)
}

func withDetails(st *status.Status, details ...protoadapt.MessageV1) *status.Status {
	ds, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return ds
}

// jobError turns a per-job status into the batch result form.
func jobError(st *status.Status) *ingestv1.JobError {
	je := &ingestv1.JobError{Code: uint32(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
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
