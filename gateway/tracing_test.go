package gateway

import (
	"maps"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-dev/sluice/envelope"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/queue"
)

const (
	clientTrace  = "0af7651916cd43dd8448eb211c80319c"
	clientSpan   = "b7ad6b7169203331"
	clientParent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// storedEnvelopes takes every job off acme's lane (premium) and returns
// the envelopes by job id.
func storedEnvelopes(t *testing.T, tb *testBundle) map[string]*envelope.Envelope {
	t.Helper()
	out := map[string]*envelope.Envelope{}
	lane, _ := tb.topo.Lane("premium")
	for i := range lane.Shards {
		msgs, err := tb.backend.Receive(t.Context(), &queue.ReceiveParams{Queue: tb.topo.ShardQueue("premium", i), Max: queue.MaxBatch})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			env, err := envelope.Decode(m.Body)
			if err != nil {
				t.Fatal(err)
			}
			out[env.GetJobId()] = env
		}
	}
	return out
}

// TestTraceContextWithTracingOff checks that with no tracer provider set
// up the caller's W3C trace context is still stored, unchanged, so that
// workers continue the submitter's trace; malformed headers are dropped.
func TestTraceContextWithTracingOff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		md   []string
		want map[string]string
	}{
		{
			"traceparent and tracestate",
			[]string{"traceparent", clientParent, "tracestate", "vendor=abc"},
			map[string]string{"traceparent": clientParent, "tracestate": "vendor=abc"},
		},
		{"traceparent", []string{"traceparent", clientParent}, map[string]string{"traceparent": clientParent}},
		{"none", nil, nil},
		{"malformed", []string{"traceparent", "00-not-a-trace-01", "tracestate", "vendor=abc"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			ctx := key(t.Context(), "acme-key-1")
			if tt.md != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, tt.md...)
			}
			resp, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			env := storedEnvelopes(t, tb)[resp.GetJobId()]
			if env == nil {
				t.Fatalf("job %s not stored", resp.GetJobId())
			}
			if got := env.GetTraceContext(); !maps.Equal(got, tt.want) {
				t.Fatalf("stored trace context %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSpansOfSubmitBatch checks the gateway's spans for a batch under a
// client's trace: one sluice.admit per job (a refused one failed), a
// sluice.enqueue under each admitted one, and the envelope carrying the
// enqueue span's context.
func TestSpansOfSubmitBatch(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tb := setupWith(t, Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	ctx := metadata.AppendToOutgoingContext(key(t.Context(), "acme-key-1"), "traceparent", clientParent)
	resp, err := tb.client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: []*ingestv1.SubmitRequest{
		{Payload: []byte("a")}, {}, {Payload: []byte("c")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	jobs := []string{resp.GetResults()[0].GetJobId(), resp.GetResults()[2].GetJobId()}
	if jobs[0] == "" || jobs[1] == "" || resp.GetResults()[1].GetError() == nil {
		t.Fatalf("results %v: want jobs 0 and 2 accepted, 1 refused", resp.GetResults())
	}

	admits := map[string]sdktrace.ReadOnlySpan{} // by job id; "" for the refused one
	enqueues := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		if got := s.SpanContext().TraceID().String(); got != clientTrace {
			t.Errorf("%s in trace %s, want the client's %s", s.Name(), got, clientTrace)
		}
		a := map[string]string{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.String()
		}
		if a["sluice.tenant"] != "acme" || a["sluice.lane"] != "premium" {
			t.Errorf("%s attributes %v, want tenant acme, lane premium", s.Name(), a)
		}
		switch s.Name() {
		case "sluice.admit":
			admits[a["sluice.job_id"]] = s
			if s.Parent().SpanID().String() != clientSpan || !s.Parent().IsRemote() || s.SpanKind() != trace.SpanKindServer {
				t.Errorf("admit of %q: parent %s remote %t kind %s, want the client's span", a["sluice.job_id"], s.Parent().SpanID(), s.Parent().IsRemote(), s.SpanKind())
			}
			wantOutcome, wantCode := "admitted", codes.Unset
			if a["sluice.job_id"] == "" {
				wantOutcome, wantCode = "invalid", codes.Error
			}
			if a["sluice.outcome"] != wantOutcome || s.Status().Code != wantCode {
				t.Errorf("admit of %q: outcome %s status %v, want %s", a["sluice.job_id"], a["sluice.outcome"], s.Status(), wantOutcome)
			}
		case "sluice.enqueue":
			enqueues[a["sluice.job_id"]] = s
		default:
			t.Errorf("unexpected span %s", s.Name())
		}
	}
	if len(admits) != 3 || len(enqueues) != 2 {
		t.Fatalf("%d admit and %d enqueue spans, want 3 and 2", len(admits), len(enqueues))
	}
	stored := storedEnvelopes(t, tb)
	for _, id := range jobs {
		e, a := enqueues[id], admits[id]
		if e == nil || a == nil {
			t.Fatalf("job %s: admit %v, enqueue %v", id, a, e)
		}
		if e.Parent().SpanID() != a.SpanContext().SpanID() || e.SpanKind() != trace.SpanKindProducer {
			t.Errorf("job %s: enqueue's parent %s kind %s, want its admit %s", id, e.Parent().SpanID(), e.SpanKind(), a.SpanContext().SpanID())
		}
		want := "00-" + clientTrace + "-" + e.SpanContext().SpanID().String() + "-01"
		if got := stored[id].GetTraceContext()["traceparent"]; got != want {
			t.Errorf("job %s: stored traceparent %q, want the enqueue span's %q", id, got, want)
		}
	}
}

// TestTracerIsOffWithoutAProvider: the gateway skips spans, and the
// context they would carry, only when no provider would record them.
// Here, in the gateway's tests, the global provider is never set.
func TestTracerIsOffWithoutAProvider(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		tp   trace.TracerProvider
		off  bool
	}{
		{"unset global", nil, true},
		{"no-op", noop.NewTracerProvider(), true},
		{"SDK", sdktrace.NewTracerProvider(), false},
	} {
		ctx := t.Context()
		spanCtx, span := tracing.Tracer(tt.tp).Start(ctx, tracing.SpanAdmit)
		span.End()
		if off := spanCtx == ctx; off != tt.off {
			t.Errorf("%s: off = %v, want %v", tt.name, off, tt.off)
		}
	}
}

// TestAdmitSpansOfRepeatedKeys: the admit span of a job repeating an
// idempotency key earlier in its batch tells what happened to it, which
// is what happened to its first: a duplicate of the first's job id, or
// the first's refusal.
func TestAdmitSpansOfRepeatedKeys(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tb := setupWith(t, Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	// tiny's burst is 3: "stored" takes a token, "k1" and "k2" the rest,
	// and "refused" finds none.
	keys := []string{"stored", "k1", "k2", "refused", "stored", "refused"}
	req := &ingestv1.SubmitBatchRequest{}
	for _, k := range keys {
		req.Jobs = append(req.Jobs, &ingestv1.SubmitRequest{Payload: []byte(k), IdempotencyKey: k})
	}
	resp, err := tb.client.SubmitBatch(key(t.Context(), "tiny-key-1"), req)
	if err != nil {
		t.Fatal(err)
	}
	storedID := resp.GetResults()[0].GetJobId()
	if r := resp.GetResults()[4]; r.GetJobId() != storedID || !r.GetDuplicate() {
		t.Fatalf("repeat of the stored job: %v, want a duplicate of %s", r, storedID)
	}
	if r := resp.GetResults()[5]; r.GetError() == nil {
		t.Fatalf("repeat of the refused job: %v, want refused", r)
	}

	type admit struct {
		outcome, jobID string
		code           codes.Code
	}
	var got []admit
	for _, s := range spans.Ended() {
		if s.Name() != "sluice.admit" {
			continue
		}
		a := admit{code: s.Status().Code}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "sluice.outcome":
				a.outcome = kv.Value.AsString()
			case "sluice.job_id":
				a.jobID = kv.Value.AsString()
			}
		}
		got = append(got, a)
	}
	want := []admit{
		{"admitted", storedID, codes.Unset},
		{"admitted", resp.GetResults()[1].GetJobId(), codes.Unset},
		{"admitted", resp.GetResults()[2].GetJobId(), codes.Unset},
		{"throttled_rate", "", codes.Error},
		{"duplicate", storedID, codes.Unset},
		{"throttled_rate", "", codes.Error},
	}
	if len(got) != len(want) {
		t.Fatalf("%d admit spans, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("admit of job %d (key %q): %+v, want %+v", i, keys[i], got[i], want[i])
		}
	}
}
