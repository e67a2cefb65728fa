package client

import (
	"cmp"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// QuotaError is the gateway's refusal of a job because the tenant is over
// its submit rate (RESOURCE_EXHAUSTED, quota subject "rate:<tenant>").
type QuotaError struct {
	// Subject is the quota that was exceeded, "rate:<tenant>". Empty for a
	// job refused inside a batch: the batch result carries no subject.
	Subject string
	// Description is the gateway's explanation.
	Description string
	// RetryAfter is how long until the tenant's bucket has a token again.
	RetryAfter time.Duration

	st       *status.Status
	hasRetry bool
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("over the submit rate, retry after %s: %s", e.RetryAfter, e.Description)
}

// GRPCStatus returns the gateway's status (RESOURCE_EXHAUSTED).
func (e *QuotaError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the gRPC status error.
func (e *QuotaError) Unwrap() error { return e.st.Err() }

// BacklogError is the gateway's refusal of a job because the tenant's lane
// has reached its tier's share of the lane's high-water mark
// (RESOURCE_EXHAUSTED, quota subject "lane_backlog:<tenant>").
type BacklogError struct {
	// Subject is "lane_backlog:<tenant>"; empty inside a batch, as for
	// QuotaError.
	Subject string
	// Description is the gateway's explanation.
	Description string
	// RetryAfter is the time the lane needs, at its drain rate, to get back
	// under the tenant's threshold.
	RetryAfter time.Duration
	// Lane, Tier, Backlog and HighWaterMark are read from the gateway's
	// description; they are zero if its wording is not the expected one.
	Lane          string
	Tier          string
	Backlog       int64
	HighWaterMark int64

	st       *status.Status
	hasRetry bool
}

func (e *BacklogError) Error() string {
	return fmt.Sprintf("lane backlog at its limit, retry after %s: %s", e.RetryAfter, e.Description)
}

// GRPCStatus returns the gateway's status (RESOURCE_EXHAUSTED).
func (e *BacklogError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the gRPC status error.
func (e *BacklogError) Unwrap() error { return e.st.Err() }

// InvalidArgumentError is the gateway's refusal of a job that breaks a
// request limit (INVALID_ARGUMENT with google.rpc.BadRequest).
type InvalidArgumentError struct {
	// Message is the gateway's summary.
	Message string
	// Violations name each bad field of the job ("payload",
	// "attributes[\"k\"]", "ttl"). Inside a batch they name the job's own
	// fields, without the "jobs[i]." prefix of the wire form.
	Violations []FieldViolation

	st *status.Status
}

// FieldViolation is one bad field and why.
type FieldViolation struct {
	Field       string
	Description string
}

func (e *InvalidArgumentError) Error() string {
	var b strings.Builder
	b.WriteString("invalid job")
	for i, v := range e.Violations {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s %s", sep, v.Field, v.Description)
	}
	if len(e.Violations) == 0 {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// GRPCStatus returns the gateway's status (INVALID_ARGUMENT).
func (e *InvalidArgumentError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the gRPC status error.
func (e *InvalidArgumentError) Unwrap() error { return e.st.Err() }

// Quota subjects the gateway puts in google.rpc.QuotaFailure, before
// ":<tenant>".
const (
	subjectRate    = "rate"
	subjectBacklog = "lane_backlog"
)

// backlogRE matches the gateway's lane high-water-mark description.
var backlogRE = regexp.MustCompile(`^lane (\S+) backlog of (\d+) jobs is at the (\S+) tier's limit \(\d+% of (\d+)\)`)

// batchFieldRE is the prefix that names a job within a SubmitBatch.
var batchFieldRE = regexp.MustCompile(`^jobs\[\d+\]\.`)

// fromStatus turns a gateway status into the package's typed error, or
// returns st.Err() for codes without one.
func fromStatus(st *status.Status) error {
	switch st.Code() {
	case codes.ResourceExhausted:
		return quotaFromStatus(st)
	case codes.InvalidArgument:
		e := &InvalidArgumentError{Message: st.Message(), st: st}
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					field := batchFieldRE.ReplaceAllString(v.GetField(), "")
					e.Violations = append(e.Violations, FieldViolation{Field: field, Description: v.GetDescription()})
				}
			}
		}
		return e
	}
	return st.Err()
}

// quotaFromStatus classifies a RESOURCE_EXHAUSTED by its quota subject or,
// when there is none (a batch result), by the description's wording. A
// RESOURCE_EXHAUSTED without either (gRPC's own message-size limits) stays
// a plain status error.
func quotaFromStatus(st *status.Status) error {
	var subject, desc string
	var retry time.Duration
	hasRetry := false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.QuotaFailure:
			if vs := d.GetViolations(); len(vs) > 0 {
				subject, desc = vs[0].GetSubject(), vs[0].GetDescription()
			}
		case *errdetails.RetryInfo:
			retry, hasRetry = d.GetRetryDelay().AsDuration(), true
		}
	}
	desc = cmp.Or(desc, st.Message())
	kind, _, _ := strings.Cut(subject, ":")
	m := backlogRE.FindStringSubmatch(desc)
	switch {
	case kind == subjectBacklog || (subject == "" && m != nil):
		e := &BacklogError{Subject: subject, Description: desc, RetryAfter: retry, st: st, hasRetry: hasRetry}
		if m != nil {
			e.Lane, e.Tier = m[1], m[3]
			e.Backlog, _ = strconv.ParseInt(m[2], 10, 64)
			e.HighWaterMark, _ = strconv.ParseInt(m[4], 10, 64)
		}
		return e
	case kind == subjectRate || (subject == "" && hasRetry):
		return &QuotaError{Subject: subject, Description: desc, RetryAfter: retry, st: st, hasRetry: hasRetry}
	}
	return st.Err()
}

// jobStatus rebuilds the status a unary Submit would have returned from a
// batch result's JobError.
func jobStatus(je *ingestv1.JobError) *status.Status {
	st := status.New(codes.Code(je.GetCode()), je.GetMessage())
	var details []protoadapt.MessageV1
	if s := je.GetQuotaSubject(); s != "" {
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: s, Description: je.GetMessage()}}})
	}
	if d := je.GetRetryDelay(); d != nil {
		details = append(details, &errdetails.RetryInfo{RetryDelay: d})
	}
	if vs := je.GetFieldViolations(); len(vs) > 0 {
		br := &errdetails.BadRequest{}
		for _, v := range vs {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
		}
		details = append(details, br)
	}
	if len(details) == 0 {
		return st
	}
	if ds, err := st.WithDetails(details...); err == nil {
		return ds
	}
	return st
}

// JobError is the error of one job that Submit, or a Producer's Future,
// gave up on. Err says why (a refusal above, or the last call's failure);
// IdempotencyKey is the key the job was sent with, the caller's or the
// one the client generated. After a failure of the call (UNAVAILABLE,
// DEADLINE_EXCEEDED, a cancelled context, a closed Producer) the gateway
// may have stored the job all the same: resubmit it with that key
// (Job.IdempotencyKey) within the gateway's idempotency window, and it is
// stored once. Without the key, a caller who let the client generate one
// could only resubmit blind, and risk the job twice (found in a
// walkthrough). SubmitBatch gives the key in each JobResult instead.
type JobError struct {
	IdempotencyKey string
	Err            error
}

func (e *JobError) Error() string { return e.Err.Error() }

// Unwrap returns Err: errors.As finds the refusals and status.Code the
// gRPC status through a JobError.
func (e *JobError) Unwrap() error { return e.Err }
