package client_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/tenant"
)

// unsendableJobs are jobs the gateway can never take: strings protobuf
// cannot encode (proto3 strings must be UTF-8), or sizes over the
// gateway's hard ceilings, each with the field the client must name.
var unsendableJobs = []struct {
	name  string
	job   client.Job
	field string
}{
	{"attribute value", client.Job{Payload: []byte("x"), Attributes: map[string]string{"k": "a\xffb"}}, `attributes["k"]`},
	{"attribute key", client.Job{Payload: []byte("x"), Attributes: map[string]string{"k\xff": "v"}}, "attributes"},
	{"idempotency key", client.Job{Payload: []byte("x"), IdempotencyKey: "order-\xc3"}, "idempotency_key"},
	{"payload over every tenant's limit", client.Job{Payload: make([]byte, tenant.MaxPayloadBytesCeiling+1)}, "payload"},
	{"job over the largest request", client.Job{Payload: []byte("x"), Attributes: map[string]string{"k": strings.Repeat("v", serve.MaxRecvMsgBytes)}}, "attributes"},
}

func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var inv *client.InvalidArgumentError
	if !errors.As(err, &inv) || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v (code %s), want an InvalidArgumentError", err, status.Code(err))
	}
	for _, v := range inv.Violations {
		if v.Field == field || (field == "attributes" && len(v.Field) >= len(field) && v.Field[:len(field)] == field) {
			return
		}
	}
	t.Fatalf("violations %+v do not name %s", inv.Violations, field)
}

// TestUnsendableJobIsRefusedAlone: a job with a string that is not UTF-8
// cannot be encoded. Submit refuses it as invalid (it was a bare INTERNAL
// "error while marshaling"), and inside SubmitBatch or a Producer's batch
// it is refused on its own: it used to fail the encoding of the whole
// call, so every other job of the batch failed with it. So is a job over
// the gateway's hard ceilings, which was sent in full, and over 17 MiB
// refused with a bare RESOURCE_EXHAUSTED, the code of a quota refusal
// (found by a tester).
func TestUnsendableJobIsRefusedAlone(t *testing.T) {
	t.Parallel()
	c := newClient(t, gatewayAddr(t), "acme-key", client.Config{})
	ctx := t.Context()
	for _, tc := range unsendableJobs {
		t.Run("Submit/"+tc.name, func(t *testing.T) {
			_, err := c.Submit(ctx, tc.job)
			wantInvalid(t, err, tc.field)
		})
		t.Run("SubmitBatch/"+tc.name, func(t *testing.T) {
			jobs := []client.Job{{Payload: []byte("good 1")}, tc.job, {Payload: []byte("good 2")}}
			results, err := c.SubmitBatch(ctx, jobs)
			var be *client.BatchError
			if !errors.As(err, &be) || be.Failed != 1 {
				t.Fatalf("SubmitBatch: %v, want one job refused", err)
			}
			for _, i := range []int{0, 2} {
				if results[i].Err != nil || results[i].JobID == "" {
					t.Errorf("good job %d: %+v", i, results[i])
				}
			}
			wantInvalid(t, results[1].Err, tc.field)
			if results[1].Attempts != 0 {
				t.Errorf("bad job was sent %d times", results[1].Attempts)
			}
		})
		t.Run("Producer/"+tc.name, func(t *testing.T) {
			p := newProducer(t, c, client.ProducerConfig{})
			var futs []*client.Future
			for _, j := range []client.Job{{Payload: []byte("good 1")}, {Payload: []byte("good 2")}} {
				f, err := p.Send(ctx, j)
				if err != nil {
					t.Fatal(err)
				}
				futs = append(futs, f)
			}
			_, err := p.Send(ctx, tc.job)
			wantInvalid(t, err, tc.field)
			for _, j := range []client.Job{{Payload: []byte("good 3")}} {
				f, err := p.Send(ctx, j)
				if err != nil {
					t.Fatal(err)
				}
				futs = append(futs, f)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for i, f := range futs {
				if res, err := f.Wait(ctx); err != nil || res.JobID == "" {
					t.Errorf("good job %d: %+v, %v", i, res, err)
				}
			}
		})
	}
}
