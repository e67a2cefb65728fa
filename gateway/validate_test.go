package gateway

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

func TestValidateJob(t *testing.T) {
	t.Parallel()
	manyAttrs := map[string]string{}
	for i := range MaxAttributes + 1 {
		manyAttrs[strings.Repeat("k", i+1)] = "v"
	}
	dur := durationpb.New
	tests := []struct {
		name      string
		req       *ingestv1.SubmitRequest
		wantField string // empty: valid
	}{
		{"minimal", &ingestv1.SubmitRequest{Payload: []byte("x")}, ""},
		{"max payload", &ingestv1.SubmitRequest{Payload: make([]byte, 100)}, ""},
		{"empty payload", &ingestv1.SubmitRequest{}, "payload"},
		{"oversize payload", &ingestv1.SubmitRequest{Payload: make([]byte, 101)}, "payload"},
		{"too many attributes", &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: manyAttrs}, "attributes"},
		{"empty attribute key", &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: map[string]string{"": "v"}}, "attributes"},
		{"long attribute key", &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: map[string]string{strings.Repeat("k", 129): "v"}}, "attributes["},
		{"long attribute value", &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: map[string]string{"k": strings.Repeat("v", 1025)}}, `attributes["k"]`},
		{"attribute at limits", &ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: map[string]string{strings.Repeat("k", 128): strings.Repeat("v", 1024)}}, ""},
		{"long idempotency key", &ingestv1.SubmitRequest{Payload: []byte("x"), IdempotencyKey: strings.Repeat("i", 129)}, "idempotency_key"},
		{"ttl too short", &ingestv1.SubmitRequest{Payload: []byte("x"), Ttl: dur(999 * time.Millisecond)}, "ttl"},
		{"ttl at min", &ingestv1.SubmitRequest{Payload: []byte("x"), Ttl: dur(time.Second)}, ""},
		{"ttl too long", &ingestv1.SubmitRequest{Payload: []byte("x"), Ttl: dur(MaxTTL + time.Second)}, "ttl"},
		{"ttl invalid", &ingestv1.SubmitRequest{Payload: []byte("x"), Ttl: &durationpb.Duration{Seconds: 1, Nanos: -5}}, "ttl"},
		{"negative delay", &ingestv1.SubmitRequest{Payload: []byte("x"), Delay: dur(-time.Second)}, "delay"},
		{"delay at max", &ingestv1.SubmitRequest{Payload: []byte("x"), Delay: dur(MaxDelay)}, ""},
		{"delay too long", &ingestv1.SubmitRequest{Payload: []byte("x"), Delay: dur(MaxDelay + time.Second)}, "delay"},
		{"ttl not after delay", &ingestv1.SubmitRequest{Payload: []byte("x"), Ttl: dur(time.Minute), Delay: dur(time.Minute)}, "ttl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := validateJob(tt.req, 100, "")
			if tt.wantField == "" {
				if len(v) != 0 {
					t.Fatalf("unexpected violations: %v", v)
				}
				return
			}
			if len(v) == 0 || !strings.HasPrefix(v[0].GetField(), tt.wantField) || v[0].GetDescription() == "" {
				t.Fatalf("violations = %v, want first on %q", v, tt.wantField)
			}
		})
	}
}

func TestValidateJobBatchPrefix(t *testing.T) {
	t.Parallel()
	v := validateJob(&ingestv1.SubmitRequest{}, 10, "jobs[3].")
	if len(v) != 1 || v[0].GetField() != "jobs[3].payload" {
		t.Fatalf("violations = %v", v)
	}
}

// FuzzValidateJob feeds arbitrary encoded requests to the validator: it
// must never panic, must cap the violations it reports, and must refuse
// every request that breaks a limit.
func FuzzValidateJob(f *testing.F) {
	seed, _ := proto.Marshal(&ingestv1.SubmitRequest{Payload: []byte("x"), Attributes: map[string]string{"a": "b"}, Ttl: durationpb.New(time.Hour)})
	f.Add(seed, 100)
	f.Add([]byte{}, 1)
	f.Fuzz(func(t *testing.T, data []byte, maxPayload int) {
		var req ingestv1.SubmitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		v := validateJob(&req, maxPayload, "")
		if len(v) > maxViolationsReported {
			t.Fatalf("%d violations reported", len(v))
		}
		if len(v) == 0 {
			if n := len(req.GetPayload()); n == 0 || n > maxPayload {
				t.Fatalf("accepted payload of %d bytes with limit %d", n, maxPayload)
			}
			if len(req.GetAttributes()) > MaxAttributes {
				t.Fatal("accepted too many attributes")
			}
			if d := req.GetDelay(); d != nil && (d.AsDuration() < 0 || d.AsDuration() > MaxDelay) {
				t.Fatalf("accepted delay %v", d.AsDuration())
			}
		}
	})
}
