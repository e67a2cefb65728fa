package tracing_test

import (
	"context"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-dev/sluice/internal/tracing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	state  = "vendor=abc,other=1"
)

func TestExtractInject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers map[string]string
		want    map[string]string // Inject of the extracted context
	}{
		{"parent and state", map[string]string{"traceparent": parent, "tracestate": state}, map[string]string{"traceparent": parent, "tracestate": state}},
		{"parent only", map[string]string{"traceparent": parent}, map[string]string{"traceparent": parent}},
		{"none", nil, nil},
		{"state without parent", map[string]string{"tracestate": state}, nil},
		{"malformed parent", map[string]string{"traceparent": "00-nope-nope-01"}, nil},
		{"all-zero trace id", map[string]string{"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tracing.Inject(tracing.Extract(t.Context(), tt.headers))
			if !maps.Equal(got, tt.want) {
				t.Fatalf("Inject(Extract(%v)) = %v, want %v", tt.headers, got, tt.want)
			}
		})
	}
}

func TestFromIncoming(t *testing.T) {
	t.Parallel()
	incoming := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(t.Context(), metadata.Pairs(kv...))
	}
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	tests := []struct {
		name string
		ctx  context.Context
		want map[string]string
	}{
		{"traceparent and tracestate", incoming("traceparent", parent, "tracestate", state), map[string]string{"traceparent": parent, "tracestate": state}},
		{"no trace headers", incoming("authorization", "Bearer k"), nil},
		{"no metadata", t.Context(), nil},
		{"malformed", incoming("traceparent", "garbage"), nil},
		// A server span made by a stats handler wins over the headers.
		{"span already in ctx", trace.ContextWithSpanContext(incoming("traceparent", parent), other), map[string]string{"traceparent": "00-01000000000000000000000000000000-0200000000000000-01"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tracing.Inject(tracing.FromIncoming(tt.ctx)); !maps.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAppendOutgoing(t *testing.T) {
	t.Parallel()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer k")
	ctx = tracing.AppendOutgoing(ctx, map[string]string{"traceparent": parent, "tracestate": state, "other": "dropped"})
	md, _ := metadata.FromOutgoingContext(ctx)
	want := metadata.Pairs("authorization", "Bearer k", "traceparent", parent, "tracestate", state)
	if len(md) != len(want) {
		t.Fatalf("outgoing metadata %v, want %v", md, want)
	}
	for k, v := range want {
		if got := md.Get(k); len(got) != 1 || got[0] != v[0] {
			t.Fatalf("outgoing %s = %v, want %v", k, got, v)
		}
	}
	if got := tracing.AppendOutgoing(t.Context(), nil); got != t.Context() {
		t.Fatal("AppendOutgoing with no headers changed the context")
	}
}

func TestSetupRefusesBadEndpoints(t *testing.T) {
	t.Parallel()
	for _, e := range []string{"", "localhost", ":4317", "localhost:", "ftp://localhost:4317", "http://"} {
		if shutdown, err := tracing.Setup(t.Context(), tracing.Config{Endpoint: e}); err == nil {
			_ = shutdown(t.Context())
			t.Errorf("Setup(%q) succeeded, want an error", e)
		}
	}
}

// receiver is an OTLP/gRPC trace collector that keeps what it receives.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestSetupExportsOverOTLP sets tracing up against a collector on a
// loopback port: a span ended just before shutdown reaches it (shutdown
// flushes), with the service name and its parent from a traceparent.
// Setup installs globals, so this test does not run in parallel.
func TestSetupExportsOverOTLP(t *testing.T) {
	rec := &receiver{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rec)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()

	for _, endpoint := range []string{lis.Addr().String(), "http://" + lis.Addr().String()} {
		rec.mu.Lock()
		rec.reqs = nil
		rec.mu.Unlock()
		shutdown, err := tracing.Setup(t.Context(), tracing.Config{Endpoint: endpoint, ServiceName: "sluice-test"})
		if err != nil {
			t.Fatal(err)
		}
		ctx := tracing.Extract(t.Context(), map[string]string{"traceparent": parent})
		_, span := tracing.Tracer(nil).Start(ctx, tracing.SpanDeliver)
		span.End()
		stopCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err = shutdown(stopCtx)
		cancel()
		if err != nil {
			t.Fatalf("%s: shutdown: %v", endpoint, err)
		}

		rec.mu.Lock()
		var got []string
		for _, req := range rec.reqs {
			for _, rs := range req.GetResourceSpans() {
				var service string
				for _, a := range rs.GetResource().GetAttributes() {
					if a.GetKey() == "service.name" {
						service = a.GetValue().GetStringValue()
					}
				}
				for _, ss := range rs.GetScopeSpans() {
					for _, s := range ss.GetSpans() {
						got = append(got, service+" "+ss.GetScope().GetName()+" "+s.GetName()+" "+
							trace.TraceID(s.GetTraceId()).String()+" "+trace.SpanID(s.GetParentSpanId()).String())
					}
				}
			}
		}
		rec.mu.Unlock()
		want := "sluice-test " + tracing.ScopeName + " sluice.deliver 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331"
		if len(got) != 1 || got[0] != want {
			t.Fatalf("%s: collector received %q, want [%q]", endpoint, got, want)
		}
	}
	// Setup installed the W3C propagator too.
	if f := otel.GetTextMapPropagator().Fields(); !slices.Contains(f, "traceparent") {
		t.Fatalf("global propagator fields %v, want traceparent among them", f)
	}
}
