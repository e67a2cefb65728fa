package envelope_test

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
)

// TestWireKnowsEveryField: Append writes the envelope's fields itself
// (wire.go); a field added to the message must be added there too, or
// Append would drop it.
func TestWireKnowsEveryField(t *testing.T) {
	t.Parallel()
	want := map[protoreflect.FieldNumber]string{
		1: "job_id", 2: "tenant", 3: "lane", 4: "payload", 5: "attributes", 6: "enqueued_at", 7: "first_attempt_at",
		8: "attempts", 9: "idempotency_key", 10: "expires_at", 11: "trace_context", 12: "dead_letter_reason",
		13: "shard", 14: "last_error", 15: "replayed_at",
	}
	fields := (&envelope.Envelope{}).ProtoReflect().Descriptor().Fields()
	if fields.Len() != len(want) {
		t.Fatalf("the envelope has %d fields, wire.go writes %d: add the new ones to appendFields", fields.Len(), len(want))
	}
	for i := range fields.Len() {
		f := fields.Get(i)
		if want[f.Number()] != string(f.Name()) {
			t.Errorf("field %d is %s, wire.go writes it as %q", f.Number(), f.Name(), want[f.Number()])
		}
	}
}

// TestWireMatchesProto: Append writes what proto.Marshal writes (in its
// deterministic order, which maps of one entry cannot differ from),
// refuses what it refuses, and keeps unknown fields.
func TestWireMatchesProto(t *testing.T) {
	t.Parallel()
	full := func() *envelope.Envelope {
		e := valid()
		e.FirstAttemptAt, e.Attempts, e.DeadLetterReason = timestamppb.New(accepted.Add(time.Minute)), 7, "attempts_exhausted"
		e.LastError, e.ReplayedAt = "worker said no", timestamppb.New(accepted.Add(time.Hour))
		return e
	}
	minimal := func() *envelope.Envelope {
		return &envelope.Envelope{JobId: "j", Tenant: "t", EnqueuedAt: timestamppb.New(accepted)}
	}
	edited := func(edit func(e *envelope.Envelope)) func() *envelope.Envelope {
		return func() *envelope.Envelope {
			e := valid()
			edit(e)
			return e
		}
	}
	tests := []struct {
		name string
		env  func() *envelope.Envelope
	}{
		{"gateway's", valid},
		{"every field", full},
		{"minimal", minimal},
		{"empty map key and value", edited(func(e *envelope.Envelope) { e.Attributes = map[string]string{"": ""} })},
		{"empty payload", edited(func(e *envelope.Envelope) { e.Payload = []byte{} })},
		{"zero timestamp", edited(func(e *envelope.Envelope) { e.EnqueuedAt = &timestamppb.Timestamp{} })},
		{"negative timestamp", edited(func(e *envelope.Envelope) {
			e.EnqueuedAt = &timestamppb.Timestamp{Seconds: -62135596800, Nanos: 999999999}
		})},
		{"largest numbers", edited(func(e *envelope.Envelope) { e.Attempts, e.Shard = 1<<32-1, 1<<32-1 })},
		{"long payload", edited(func(e *envelope.Envelope) { e.Payload = bytes.Repeat([]byte("x"), 200_000) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			appendMatchesMarshal(t, tt.env())
		})
	}

	t.Run("maps of many entries", func(t *testing.T) {
		t.Parallel()
		e := full()
		e.Attributes = map[string]string{"a": "1", "b": "", "": "3", "d": "4"}
		e.TraceContext = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"}
		got, err := envelope.Append(nil, e)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("Append wrote %d bytes, proto.Marshal %d", len(got), len(want))
		}
		back, err := envelope.Decode(got)
		if err != nil || !proto.Equal(back, e) {
			t.Fatalf("Decode(Append) = %v, %v; want %v", back, err, e)
		}
	})

	t.Run("invalid UTF-8", func(t *testing.T) {
		t.Parallel()
		for _, edit := range []func(e *envelope.Envelope){
			func(e *envelope.Envelope) { e.Lane = "\xff" },
			func(e *envelope.Envelope) { e.Attributes = map[string]string{"k": "\xff"} },
			func(e *envelope.Envelope) { e.TraceContext = map[string]string{"\xff": "v"} },
			func(e *envelope.Envelope) { e.IdempotencyKey, e.LastError = "ok", "\xfe" },
		} {
			e := valid()
			edit(e)
			_, want := proto.Marshal(e)
			buf := []byte("abc")
			got, err := envelope.Append(buf, e)
			if want == nil || err == nil || err.Error() != "encode envelope: "+want.Error() || string(got) != "abc" {
				t.Errorf("Append = %q, %v; want abc and %v", got, err, want)
			}
		}
	})

	t.Run("unknown fields", func(t *testing.T) {
		t.Parallel()
		good, err := envelope.Encode(valid())
		if err != nil {
			t.Fatal(err)
		}
		// A field 99 written by a newer build, in the envelope and in its
		// acceptance time.
		body := protowire.AppendString(protowire.AppendTag(good, 99, protowire.BytesType), "from the future")
		ts := protowire.AppendVarint(protowire.AppendTag(nil, 98, protowire.VarintType), 5)
		body = protowire.AppendBytes(protowire.AppendTag(body, 6, protowire.BytesType), ts)
		e, err := envelope.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		got := appendMatchesMarshal(t, e)
		back, err := envelope.Decode(got)
		if err != nil || !proto.Equal(back, e) {
			t.Fatalf("Decode(Append) = %v, %v; want %v", back, err, e)
		}
	})
}

// BenchmarkAppend: a gateway's envelope (200-byte payload, a trace
// context) appended to a buffer with room.
//
//	BenchmarkAppend-2   	 5634874	       213.1 ns/op	       0 B/op	       0 allocs/op
//	(proto.MarshalAppend, before wire.go: 667.2 ns/op, 64 B/op, 4 allocs/op)
func BenchmarkAppend(b *testing.B) {
	e := valid()
	e.Payload = make([]byte, 200)
	e.Attributes = nil
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := envelope.Append(buf, e); err != nil {
			b.Fatal(err)
		}
	}
}

// appendMatchesMarshal checks that Append writes e as proto.Marshal does
// (deterministically) and returns what it wrote.
func appendMatchesMarshal(t *testing.T, e *envelope.Envelope) []byte {
	t.Helper()
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := envelope.Append(nil, e)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Append = %x, %v\nproto.Marshal %x", got, err, want)
	}
	return got
}
