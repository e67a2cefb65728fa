package gateway

import (
	"fmt"
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

// TestValidateJobTTLAgainstDelay: the TTL is checked against the delay
// only when both are valid. A delay over its limit made a valid TTL a
// second violation ("ttl is 30m0s, not longer than the delay of 1h0m0s"),
// sending the caller to change a field that was right, and a TTL under
// its limit was reported twice.
func TestValidateJobTTLAgainstDelay(t *testing.T) {
	t.Parallel()
	dur := durationpb.New
	for _, tt := range []struct {
		name       string
		ttl, delay time.Duration
		want       []string // the fields named, in order
	}{
		{"delay too long, ttl valid", 30 * time.Minute, time.Hour, []string{"delay"}},
		{"ttl too short, delay valid", 500 * time.Millisecond, 10 * time.Second, []string{"ttl"}},
		{"negative delay", time.Minute, -time.Second, []string{"delay"}},
		{"both valid, ttl not after delay", time.Minute, 2 * time.Minute, []string{"ttl"}},
		{"both valid", 2 * time.Minute, time.Minute, nil},
	} {
		v := validateJob(&ingestv1.SubmitRequest{Payload: []byte("x"), Ttl: dur(tt.ttl), Delay: dur(tt.delay)}, 100, "")
		var got []string
		for _, fv := range v {
			got = append(got, fv.GetField())
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: violations %v, want fields %v", tt.name, v, tt.want)
		}
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
	for _, seed := range []*ingestv1.SubmitRequest{
		{Payload: []byte("x"), Attributes: map[string]string{"a": "b"}, Ttl: durationpb.New(time.Hour)},
		{Payload: []byte(`{"to":"a@example.com"}`), Attributes: map[string]string{"kind": "email"}, IdempotencyKey: "order-42", Ttl: durationpb.New(time.Hour), Delay: durationpb.New(10 * time.Second)},
		{Payload: make([]byte, 100), Attributes: map[string]string{strings.Repeat("k", MaxAttributeKeyBytes): strings.Repeat("v", MaxAttributeValBytes)}},
		{Payload: []byte("x"), Ttl: &durationpb.Duration{Seconds: 1, Nanos: -5}},
	} {
		b, err := proto.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, 100)
	}
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
		for _, fv := range v {
			if fv.GetField() == "" || fv.GetDescription() == "" {
				t.Fatalf("violation without field or description: %v", fv)
			}
		}
		if len(v) > 0 {
			return
		}
		if n := len(req.GetPayload()); n == 0 || n > maxPayload {
			t.Fatalf("accepted payload of %d bytes with limit %d", n, maxPayload)
		}
		if len(req.GetAttributes()) > MaxAttributes {
			t.Fatal("accepted too many attributes")
		}
		for k, val := range req.GetAttributes() {
			if k == "" || len(k) > MaxAttributeKeyBytes || len(val) > MaxAttributeValBytes {
				t.Fatalf("accepted attribute %q of %d value bytes", k, len(val))
			}
		}
		if len(req.GetIdempotencyKey()) > MaxIdempotencyKeyLen {
			t.Fatal("accepted a long idempotency key")
		}
		var ttl time.Duration
		if d := req.GetTtl(); d != nil {
			if ttl = d.AsDuration(); d.CheckValid() != nil || ttl < MinTTL || ttl > MaxTTL {
				t.Fatalf("accepted ttl %v", d)
			}
		}
		if d := req.GetDelay(); d != nil {
			if delay := d.AsDuration(); d.CheckValid() != nil || delay < 0 || delay > MaxDelay || (ttl > 0 && delay >= ttl) {
				t.Fatalf("accepted delay %v with ttl %v", d, ttl)
			}
		}
	})
}

func TestValidateBatch(t *testing.T) {
	t.Parallel()
	jobs := func(n, size int) *ingestv1.SubmitBatchRequest {
		b := &ingestv1.SubmitBatchRequest{}
		for range n {
			b.Jobs = append(b.Jobs, &ingestv1.SubmitRequest{Payload: make([]byte, size)})
		}
		return b
	}
	tests := []struct {
		name string
		req  *ingestv1.SubmitBatchRequest
		want int // violations
	}{
		{"one job", jobs(1, 1), 0},
		{"most jobs", jobs(MaxBatchJobs, 1), 0},
		{"no jobs", jobs(0, 1), 1},
		{"too many jobs", jobs(MaxBatchJobs+1, 1), 1},
		{"at the byte limit", jobs(1, MaxBatchBytes-10), 0}, // tag, lengths: 10 bytes
		{"over the byte limit", jobs(2, MaxBatchBytes/2), 1},
		{"too many and too big", jobs(MaxBatchJobs+1, MaxBatchBytes/MaxBatchJobs), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := validateBatch(tt.req)
			if len(v) != tt.want {
				t.Fatalf("violations %v, want %d", v, tt.want)
			}
			for _, fv := range v {
				if fv.GetField() != "jobs" {
					t.Fatalf("violation on %q, want jobs", fv.GetField())
				}
			}
		})
	}
}

// FuzzValidateBatch decodes arbitrary batches: the batch check never
// panics and refuses exactly the batches outside its limits.
func FuzzValidateBatch(f *testing.F) {
	valid, err := proto.Marshal(&ingestv1.SubmitBatchRequest{Jobs: []*ingestv1.SubmitRequest{
		{Payload: []byte("a"), IdempotencyKey: "k1"}, {Payload: []byte("b"), Attributes: map[string]string{"x": "y"}},
	}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req ingestv1.SubmitBatchRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		v := validateBatch(&req)
		n := len(req.GetJobs())
		if bad := n == 0 || n > MaxBatchJobs || proto.Size(&req) > MaxBatchBytes; bad != (len(v) > 0) {
			t.Fatalf("batch of %d jobs, %d bytes: violations %v", n, proto.Size(&req), v)
		}
		for i, job := range req.GetJobs() {
			for _, fv := range validateJob(job, 1<<20, fmt.Sprintf("jobs[%d].", i)) {
				if !strings.HasPrefix(fv.GetField(), fmt.Sprintf("jobs[%d].", i)) {
					t.Fatalf("violation %v not prefixed with its job", fv)
				}
			}
		}
	})
}
