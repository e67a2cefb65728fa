package ingestcheck

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/tenant"
)

func TestUTF8(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  *ingestv1.SubmitRequest
		want []string // field: description, in order
	}{
		{"valid", &ingestv1.SubmitRequest{Payload: []byte("\xff any bytes"), Attributes: map[string]string{"é": "ü"}, IdempotencyKey: "k-1"}, nil},
		{"empty", &ingestv1.SubmitRequest{}, nil},
		{"attribute value", &ingestv1.SubmitRequest{Attributes: map[string]string{"k": "a\xffb"}}, []string{`attributes["k"]: value is not valid UTF-8`}},
		{"attribute key", &ingestv1.SubmitRequest{Attributes: map[string]string{"k\xff": "v"}}, []string{`attributes: key "k\xff" is not valid UTF-8`}},
		{"idempotency key", &ingestv1.SubmitRequest{IdempotencyKey: "order-\xc3"}, []string{`idempotency_key: "order-\xc3" is not valid UTF-8`}},
		{"several, sorted by field", &ingestv1.SubmitRequest{
			Attributes:     map[string]string{"b": "\xff", "a": "\xfe", "ok": "fine"},
			IdempotencyKey: "\xc3",
		}, []string{
			`attributes["a"]: value is not valid UTF-8`,
			`attributes["b"]: value is not valid UTF-8`,
			`idempotency_key: "\xc3" is not valid UTF-8`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, v := range UTF8(tt.req) {
				got = append(got, v.GetField()+": "+v.GetDescription())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("UTF8 = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOversize(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", MaxRequestBytes)
	tests := []struct {
		name string
		req  *ingestv1.SubmitRequest
		want string // field: description prefix; "" for none
	}{
		{"at the ceiling", &ingestv1.SubmitRequest{Payload: make([]byte, MaxPayloadBytes)}, ""},
		{"payload over", &ingestv1.SubmitRequest{Payload: make([]byte, MaxPayloadBytes+1)}, "payload: is 163841 bytes, over the most any tenant may send, 163840"},
		{"attributes over", &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: map[string]string{"k": big}}, "attributes: make the job "},
		{"idempotency key over", &ingestv1.SubmitRequest{Payload: []byte("x"), IdempotencyKey: big}, "idempotency_key: make the job "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vs := Oversize(tt.req)
			switch {
			case tt.want == "" && len(vs) > 0:
				t.Fatalf("Oversize = %v, want none", vs)
			case tt.want == "":
			case len(vs) != 1 || !strings.HasPrefix(vs[0].GetField()+": "+vs[0].GetDescription(), tt.want):
				t.Fatalf("Oversize = %v, want one %q…", vs, tt.want)
			}
		})
	}
}

// TestCeilingsAreTheGateways: the ceilings declared here are the
// gateway's, which the package does not import for the client's sake.
func TestCeilingsAreTheGateways(t *testing.T) {
	t.Parallel()
	if MaxPayloadBytes != tenant.MaxPayloadBytesCeiling {
		t.Errorf("MaxPayloadBytes = %d, tenant.MaxPayloadBytesCeiling = %d", MaxPayloadBytes, tenant.MaxPayloadBytesCeiling)
	}
	if MaxRequestBytes != serve.MaxRecvMsgBytes {
		t.Errorf("MaxRequestBytes = %d, serve.MaxRecvMsgBytes = %d", MaxRequestBytes, serve.MaxRecvMsgBytes)
	}
}

// FuzzSizeBound: sizeBound, which spares most jobs an encoding, is never
// below the job's encoded size, whatever its payload, key, attributes and
// durations.
func FuzzSizeBound(f *testing.F) {
	f.Add([]byte("payload"), "key-1", "k", "v", int64(3600), int64(60), uint8(3))
	f.Add([]byte{}, "", "", "", int64(-1), int64(math.MaxInt64), uint8(200))
	f.Fuzz(func(t *testing.T, payload []byte, key, k, v string, ttl, delay int64, n uint8) {
		req := &ingestv1.SubmitRequest{
			Payload: payload, IdempotencyKey: key,
			Ttl: durationpb.New(time.Duration(ttl)), Delay: durationpb.New(time.Duration(delay)),
		}
		if n > 0 {
			req.Attributes = map[string]string{}
			for i := range int(n) {
				req.Attributes[fmt.Sprint(k, i)] = strings.Repeat(v, i%5)
			}
		}
		if got, size := sizeBound(req), proto.Size(req); got < size {
			t.Fatalf("sizeBound %d < encoded size %d", got, size)
		}
	})
}
