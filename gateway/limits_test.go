package gateway

import (
	"encoding/base64"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
	envelopev1 "github.com/sluice-dev/sluice/gen/sluice/envelope/v1"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/tenant"
)

// TestLimitsOverGRPC sends each limit's largest valid value and the next
// one up through a real server, as a client would: the valid one is
// stored, the other refused with INVALID_ARGUMENT and a field violation
// naming the field, or, past the transport limits, by gRPC itself.
func TestLimitsOverGRPC(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := key(t.Context(), "acme-key-1") // premium: payload limit = the ceiling
	job := func(payload int) *ingestv1.SubmitRequest {
		return &ingestv1.SubmitRequest{Payload: make([]byte, payload)}
	}
	attrs := func(n, keyLen, valLen int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[string(rune('a'+i))+strings.Repeat("k", keyLen-1)] = strings.Repeat("v", valLen)
		}
		return m
	}
	batch := func(n, payload int) *ingestv1.SubmitBatchRequest {
		b := &ingestv1.SubmitBatchRequest{}
		for range n {
			b.Jobs = append(b.Jobs, job(payload))
		}
		return b
	}
	// Jobs of this size put a batch of 200 just over MaxBatchBytes, and of
	// 220 over the transport limit.
	const bigJob = MaxBatchBytes/200 + 1
	tests := []struct {
		name      string
		submit    *ingestv1.SubmitRequest
		batch     *ingestv1.SubmitBatchRequest
		md        []string
		want      codes.Code
		wantField string
	}{
		{name: "payload at the ceiling", submit: job(tenant.MaxPayloadBytesCeiling), want: codes.OK},
		{name: "payload over the ceiling", submit: job(tenant.MaxPayloadBytesCeiling + 1), want: codes.InvalidArgument, wantField: "payload"},
		{name: "attributes at the limits", submit: &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: attrs(MaxAttributes, MaxAttributeKeyBytes, MaxAttributeValBytes)}, want: codes.OK},
		{name: "one attribute too many", submit: &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: attrs(MaxAttributes+1, 1, 1)}, want: codes.InvalidArgument, wantField: "attributes"},
		{name: "attribute key too long", submit: &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: attrs(1, MaxAttributeKeyBytes+1, 1)}, want: codes.InvalidArgument, wantField: "attributes[\"a"},
		{name: "attribute value too long", submit: &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: attrs(1, 1, MaxAttributeValBytes+1)}, want: codes.InvalidArgument, wantField: `attributes["a"]`},
		{name: "idempotency key at the limit", submit: &ingestv1.SubmitRequest{Payload: []byte("x"), IdempotencyKey: strings.Repeat("i", MaxIdempotencyKeyLen)}, want: codes.OK},
		{name: "idempotency key too long", submit: &ingestv1.SubmitRequest{Payload: []byte("x"), IdempotencyKey: strings.Repeat("i", MaxIdempotencyKeyLen+1)}, want: codes.InvalidArgument, wantField: "idempotency_key"},
		{name: "batch of the most jobs", batch: batch(MaxBatchJobs, 1), want: codes.OK},
		{name: "batch of too many jobs", batch: batch(MaxBatchJobs+1, 1), want: codes.InvalidArgument, wantField: "jobs"},
		{name: "empty batch", batch: batch(0, 1), want: codes.InvalidArgument, wantField: "jobs"},
		{name: "batch over its byte limit", batch: batch(200, bigJob), want: codes.InvalidArgument, wantField: "jobs"},
		{name: "batch over the transport limit", batch: batch(220, bigJob), want: codes.ResourceExhausted},
		{name: "metadata over the transport limit", submit: job(1), md: []string{"x-filler", strings.Repeat("f", serve.MaxHeaderListBytes)}, want: codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := metadata.AppendToOutgoingContext(ctx, tt.md...)
			var err error
			if tt.submit != nil {
				_, err = tb.client.Submit(ctx, tt.submit)
			} else {
				var resp *ingestv1.SubmitBatchResponse
				resp, err = tb.client.SubmitBatch(ctx, tt.batch)
				for i, r := range resp.GetResults() {
					if r.GetError() != nil {
						t.Fatalf("job %d refused: %v", i, r.GetError())
					}
				}
			}
			st := status.Convert(err)
			if st.Code() != tt.want {
				t.Fatalf("code %v (%s), want %v", st.Code(), st.Message(), tt.want)
			}
			if tt.wantField == "" {
				return
			}
			var fields []string
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok {
					for _, v := range br.GetFieldViolations() {
						fields = append(fields, v.GetField())
						if strings.HasPrefix(v.GetField(), tt.wantField) && v.GetDescription() != "" {
							return
						}
					}
				}
			}
			t.Fatalf("field violations %v, want one on %q (%s)", fields, tt.wantField, st.Message())
		})
	}
}

// TestTransportLimitIsAboveTheBatchLimit: a batch the handler accepts is
// never cut off by gRPC, and one just over the handler's limit gets the
// handler's answer (with field details), not the transport's.
func TestTransportLimitIsAboveTheBatchLimit(t *testing.T) {
	t.Parallel()
	if serve.MaxRecvMsgBytes <= MaxBatchBytes {
		t.Fatalf("serve.MaxRecvMsgBytes %d <= MaxBatchBytes %d", serve.MaxRecvMsgBytes, MaxBatchBytes)
	}
}

// TestTenantComesOnlyFromTheKey tries to submit as another tenant every
// way a request could carry one: tenant-like metadata, an unknown field
// in the request message. The job is stored as the key's tenant.
func TestTenantComesOnlyFromTheKey(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := metadata.AppendToOutgoingContext(key(t.Context(), "tiny-key-1"), "tenant", "acme", "x-sluice-tenant", "acme", "x-tenant-id", "acme")
	req := &ingestv1.SubmitRequest{Payload: []byte("spoof")}
	req.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "acme"))
	resp, err := tb.client.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var found *envelope.Envelope
	for _, l := range tb.topo.Lanes {
		for i := range l.Shards {
			msgs, err := tb.backend.Receive(t.Context(), &queue.ReceiveParams{Queue: tb.topo.ShardQueue(l.Name, i), Max: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				env, err := envelope.Decode(m.Body)
				if err != nil {
					t.Fatal(err)
				}
				found = env
			}
		}
	}
	if found == nil || found.GetJobId() != resp.GetJobId() || found.GetTenant() != "tiny" || found.GetLane() != "free" {
		t.Fatalf("stored %v, want job %s of tenant tiny in lane free", found, resp.GetJobId())
	}
	// Two credentials in one call: neither counts.
	two := metadata.AppendToOutgoingContext(key(t.Context(), "tiny-key-1"), "authorization", "Bearer acme-key-1")
	if _, err := tb.client.Submit(two, &ingestv1.SubmitRequest{Payload: []byte("x")}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("two keys: %v, want UNAUTHENTICATED", err)
	}
}

// TestAcceptedEnvelopeHasRoomForTheDrainer: the drainer adds to an
// envelope as it retries or dead-letters it (the first attempt's time,
// the attempts, the last error, the reason, a replay's time). An envelope
// at the gateway's limit must still fit SQS's 256 KiB after base64 with
// all of them at their largest. At 192 KiB it did not: the job's retry
// and dead-letter moves failed as too large, for ever, until SQS's own
// redrive took it to the DLQ with no reason.
func TestAcceptedEnvelopeHasRoomForTheDrainer(t *testing.T) {
	t.Parallel()
	env := &envelopev1.Envelope{
		JobId: "01JOB", Tenant: "acme", Lane: "premium", EnqueuedAt: timestamppb.Now(),
		TraceContext: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}
	body, err := envelope.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	env.Payload = make([]byte, MaxMessageBytesDefault-len(body)-4) // less its tag and length
	if body, err = envelope.Encode(env); err != nil || len(body) != MaxMessageBytesDefault {
		t.Fatalf("envelope at the limit: %d bytes (%v), want %d", len(body), err, MaxMessageBytesDefault)
	}
	far := timestamppb.New(time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC))
	env.FirstAttemptAt, env.ReplayedAt, env.Attempts = far, far, math.MaxUint32
	env.DeadLetterReason = strings.Repeat("r", 64) // the reasons are short words
	env.LastError = envelope.LastError(errors.New(strings.Repeat("€", envelope.LastErrorMax)))
	if body, err = envelope.Encode(env); err != nil {
		t.Fatal(err)
	}
	if n := base64.StdEncoding.EncodedLen(len(body)); n > queue.MaxBodyBytes {
		t.Fatalf("after the drainer's additions the envelope is %d bytes, %d in base64: over SQS's %d", len(body), n, queue.MaxBodyBytes)
	}
}
