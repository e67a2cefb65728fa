package envelope_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
)

var accepted = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func valid() *envelope.Envelope {
	return &envelope.Envelope{
		JobId: "01JDQ6Z5W1Y7Q0X9R8T4M2N3P5", Tenant: "acme", Lane: "std", Payload: []byte("hello"),
		Attributes: map[string]string{"kind": "email"}, EnqueuedAt: timestamppb.New(accepted),
		IdempotencyKey: "k1", TraceContext: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		ExpiresAt: timestamppb.New(accepted.Add(time.Hour)), Shard: 3,
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(e *envelope.Envelope)
		want string // error prefix; "" for valid
	}{
		{"valid", func(*envelope.Envelope) {}, ""},
		{"retried and dead-lettered", func(e *envelope.Envelope) {
			e.Attempts, e.FirstAttemptAt, e.DeadLetterReason = 5, timestamppb.New(accepted.Add(time.Second)), "attempts_exhausted"
		}, ""},
		{"no job id", func(e *envelope.Envelope) { e.JobId = "" }, "no job_id"},
		{"no tenant", func(e *envelope.Envelope) { e.Tenant = "" }, "no tenant"},
		{"no acceptance time", func(e *envelope.Envelope) { e.EnqueuedAt = nil }, "no enqueued_at"},
		{"acceptance time out of range", func(e *envelope.Envelope) { e.EnqueuedAt = &timestamppb.Timestamp{Seconds: 1 << 62} }, "enqueued_at: "},
		{"first attempt out of range", func(e *envelope.Envelope) { e.FirstAttemptAt = &timestamppb.Timestamp{Nanos: -1} }, "first_attempt_at: "},
		{"expiry out of range", func(e *envelope.Envelope) { e.ExpiresAt = &timestamppb.Timestamp{Seconds: 1, Nanos: -1} }, "expires_at: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := valid()
			tt.edit(e)
			err := envelope.Check(e)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Check = %v, want %q…", err, tt.want)
			}
			if _, encErr := envelope.Encode(e); encErr == nil || !strings.Contains(encErr.Error(), err.Error()) {
				t.Fatalf("Encode = %v, want it to refuse with %q", encErr, err)
			}
			b, mErr := proto.Marshal(e)
			if mErr != nil {
				t.Fatal(mErr)
			}
			if _, decErr := envelope.Decode(b); decErr == nil || decErr.Error() != err.Error() {
				t.Fatalf("Decode = %v, want %q", decErr, err)
			}
		})
	}
	if err := envelope.Check(nil); err == nil {
		t.Fatal("Check(nil) = nil")
	}
}

func TestDecodeRefusesWhatIsNotAnEnvelope(t *testing.T) {
	t.Parallel()
	good, err := envelope.Encode(valid())
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{{0xff, 0xff, 0xff}, []byte("hello, I am not protobuf"), good[:len(good)-3], nil} {
		env, err := envelope.Decode(body)
		if env != nil || err == nil {
			t.Fatalf("Decode(%q) = %v, %v: want an error", body, env, err)
		}
	}
}

// FuzzDecode feeds arbitrary bodies to Decode: it never panics, returns
// exactly one of an envelope and an error, and an envelope it accepts
// passes Check and survives Encode and Decode again unchanged.
func FuzzDecode(f *testing.F) {
	good, err := envelope.Encode(valid())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte("hello, I am not protobuf"))
	f.Add(good[:len(good)-3])
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := envelope.Decode(body)
		if (env == nil) == (err == nil) {
			t.Fatalf("Decode = %v, %v: want exactly one", env, err)
		}
		if env == nil {
			return
		}
		if err := envelope.Check(env); err != nil {
			t.Fatalf("Decode accepted an envelope Check refuses: %v", err)
		}
		roundTrip(t, env)
	})
}

// FuzzRoundTrip builds envelopes field by field: Encode accepts exactly
// those Check accepts, and what it encodes decodes to an equal envelope.
func FuzzRoundTrip(f *testing.F) {
	f.Add("01JDQ6Z5W1Y7Q0X9R8T4M2N3P5", "acme", "std", []byte("hello"), "kind", "email", int64(1_795_000_000), int32(0), int64(3600), uint32(0), uint32(3), "k1", "")
	f.Add("", "acme", "std", []byte{}, "", "", int64(0), int32(0), int64(0), uint32(0), uint32(0), "", "")
	f.Add("id", "", "bulk", []byte{0}, "a", "b", int64(-1), int32(-1), int64(-5), uint32(9), uint32(1), "", "attempts_exhausted")
	f.Add("id", "t", "", []byte("\xff"), "k", "\xff", int64(1<<62), int32(1e9), int64(0), uint32(1), uint32(0), "\xff", "x")
	f.Fuzz(func(t *testing.T, id, tenant, lane string, payload []byte, attrKey, attrValue string, secs int64, nanos int32, ttl int64, attempts, shard uint32, key, reason string) {
		e := &envelope.Envelope{
			JobId: id, Tenant: tenant, Lane: lane, Payload: payload, Attributes: map[string]string{attrKey: attrValue},
			EnqueuedAt: &timestamppb.Timestamp{Seconds: secs, Nanos: nanos}, Attempts: attempts, Shard: shard,
			IdempotencyKey: key, DeadLetterReason: reason,
		}
		if ttl != 0 {
			e.ExpiresAt = &timestamppb.Timestamp{Seconds: secs + ttl, Nanos: nanos}
		}
		if attempts > 0 {
			e.FirstAttemptAt = &timestamppb.Timestamp{Seconds: secs, Nanos: nanos}
		}
		checkErr := envelope.Check(e)
		b, err := envelope.Encode(e)
		// Append writes the fields itself (wire.go): what proto.Marshal
		// writes (its deterministic order: the maps have one entry), or
		// the same refusal.
		appended, appendErr := envelope.Append(nil, e)
		if (appendErr == nil) != (err == nil) || (err != nil && appendErr.Error() != err.Error()) {
			t.Fatalf("Append = %v, Encode = %v", appendErr, err)
		}
		if want, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(e); err == nil && !bytes.Equal(appended, want) {
			t.Fatalf("Append = %x\nproto.Marshal %x", appended, want)
		}
		if checkErr != nil {
			if err == nil {
				t.Fatalf("Encode accepted an envelope Check refuses (%v)", checkErr)
			}
			return
		}
		if err != nil {
			// Only invalid UTF-8 in a string field keeps a checked
			// envelope from encoding: proto3 strings must be UTF-8.
			if !strings.Contains(err.Error(), "UTF-8") {
				t.Fatalf("Encode of a checked envelope: %v", err)
			}
			return
		}
		got, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("Decode of an encoded envelope: %v", err)
		}
		if !proto.Equal(got, e) {
			t.Fatalf("round trip changed the envelope:\n got %v\nwant %v", got, e)
		}
		roundTrip(t, got)
	})
}

func roundTrip(t *testing.T, env *envelope.Envelope) {
	t.Helper()
	b, err := envelope.Encode(env)
	if err != nil {
		t.Fatalf("Encode of a decoded envelope: %v", err)
	}
	again, err := envelope.Decode(b)
	if err != nil {
		t.Fatalf("Decode of a re-encoded envelope: %v", err)
	}
	if !proto.Equal(again, env) {
		t.Fatalf("round trip changed the envelope:\n got %v\nwant %v", again, env)
	}
}

// TestAppend: Append adds to a buffer exactly what Encode returns, in the
// buffer's array when it has room, and refuses an invalid envelope,
// leaving the buffer as it was.
func TestAppend(t *testing.T) {
	t.Parallel()
	want, err := envelope.Encode(valid())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 2*len(want)+3)
	buf = append(buf, "abc"...)
	out, err := envelope.Append(buf, valid())
	if err != nil || string(out[:3]) != "abc" || string(out[3:]) != string(want) {
		t.Fatalf("Append = %q, %v; want abc and the encoding", out, err)
	}
	if &out[0] != &buf[:1][0] {
		t.Error("Append with room in the buffer made a new array")
	}
	env, err := envelope.Decode(out[3:])
	if err != nil || !proto.Equal(env, valid()) {
		t.Errorf("Decode(Append) = %v, %v", env, err)
	}
	bad := valid()
	bad.Tenant = ""
	if out, err := envelope.Append(buf, bad); err == nil || len(out) != len(buf) {
		t.Errorf("Append of an envelope without a tenant = %d bytes, %v; want the buffer unchanged and an error", len(out), err)
	}
}
