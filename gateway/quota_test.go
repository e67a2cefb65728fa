package gateway

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// TestQuotaRefusalForms: a job refused for its tenant's rate says the same
// in a unary call (a status with QuotaFailure and RetryInfo details) and in
// a batch (a JobError with the message and the retry delay), though the
// batch form is built without the details.
func TestQuotaRefusalForms(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := key(t.Context(), "tiny-key-1") // burst 3, then one token in 1,000 s
	jobs := make([]*ingestv1.SubmitRequest, 5)
	for i := range jobs {
		jobs[i] = &ingestv1.SubmitRequest{Payload: []byte("x")}
	}
	resp, err := tb.client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	var refused []*ingestv1.JobError
	for _, r := range resp.GetResults() {
		if e := r.GetError(); e != nil {
			refused = append(refused, e)
		}
	}
	if len(refused) != 2 {
		t.Fatalf("%d of 5 refused, want 2 (burst 3): %v", len(refused), resp.GetResults())
	}
	_, err = tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("x")})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("unary: %v, want RESOURCE_EXHAUSTED", err)
	}
	var quota *errdetails.QuotaFailure
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.QuotaFailure:
			quota = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	if quota == nil || len(quota.GetViolations()) != 1 || retry == nil {
		t.Fatalf("unary details %v, want one QuotaFailure violation and a RetryInfo", st.Details())
	}
	if v := quota.GetViolations()[0]; v.GetSubject() != "rate:tiny" || v.GetDescription() != st.Message() {
		t.Errorf("QuotaFailure violation %v, want subject rate:tiny and the status message", v)
	}
	if d := retry.GetRetryDelay().AsDuration(); d <= 0 {
		t.Errorf("unary RetryInfo %v, want a positive delay", d)
	}
	for i, e := range refused {
		if codes.Code(e.GetCode()) != codes.ResourceExhausted || e.GetMessage() != st.Message() || e.GetRetryDelay().AsDuration() <= 0 || len(e.GetFieldViolations()) != 0 || e.GetQuotaSubject() != "rate:tiny" {
			t.Errorf("batch refusal %d: %v, want RESOURCE_EXHAUSTED, %q, a positive retry delay and quota subject rate:tiny", i, e, st.Message())
		}
	}
}
