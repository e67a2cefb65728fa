package e2e

import (
	"context"
	"encoding/hex"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
)

// collector is an OTLP/gRPC trace collector on a loopback port that keeps
// the spans it receives.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []collected
}

type collected struct {
	service, name, traceID, spanID, parentID string
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	c.addr = serveGRPC(t, func(s *grpc.Server) { coltracepb.RegisterTraceServiceServer(s, c) })
	return c
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, collected{
					service: service, name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()),
					spanID: hex.EncodeToString(s.GetSpanId()), parentID: hex.EncodeToString(s.GetParentSpanId()),
				})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// traceparentWorker records the traceparent of each call.
type traceparentWorker struct {
	workerv1.UnimplementedWorkerServiceServer
	got chan string
}

func (w *traceparentWorker) Process(ctx context.Context, _ *workerv1.ProcessRequest) (*workerv1.ProcessResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	tp := ""
	if v := md.Get("traceparent"); len(v) > 0 {
		tp = v[0]
	}
	select {
	case w.got <- tp:
	default:
	}
	return &workerv1.ProcessResponse{}, nil
}

// TestOTLPEndpointExportsTheJobsSpans runs the gateway with
// --otlp-endpoint, submits a job under a client's traceparent and stops
// the gateway: by the time it has exited, the collector has the job's
// gateway and drainer spans in the client's trace (shutdown flushes), and
// the worker got the delivery span as its parent.
func TestOTLPEndpointExportsTheJobsSpans(t *testing.T) {
	t.Parallel()
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	col := startCollector(t)
	w := &traceparentWorker{got: make(chan string, 1)}
	workerAddr := serveGRPC(t, func(s *grpc.Server) { workerv1.RegisterWorkerServiceServer(s, w) })
	dir := t.TempDir()
	gw := start(t, "gateway",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "",
		"--data-dir", dir, "--tenants", writeFile(t, dir, "tenants.yaml", tenantsYAML),
		"--worker-addr", workerAddr, "--otlp-endpoint", col.addr, "--shutdown-grace", "10s")
	c := client(t, gw.addr("gateway listening"))

	ctx := metadata.AppendToOutgoingContext(withKey(t.Context(), "alpha-key-123"), "traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	resp, err := c.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("traced")})
	if err != nil {
		t.Fatal(err)
	}
	var workerParent string
	select {
	case workerParent = <-w.got:
	case <-time.After(60 * time.Second):
		t.Fatalf("job %s not delivered within 60s", resp.GetJobId())
	}
	if err := gw.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("gateway exit: %v", err)
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	byName := map[string]collected{}
	for _, s := range col.spans {
		if s.traceID == traceID {
			byName[s.name] = s
		}
	}
	admit, enqueue, deliver := byName["sluice.admit"], byName["sluice.enqueue"], byName["sluice.deliver"]
	if admit.parentID != clientSpan || enqueue.parentID != admit.spanID || enqueue.spanID == "" || deliver.parentID != enqueue.spanID || deliver.spanID == "" {
		t.Fatalf("collected spans of the client's trace %+v: want sluice.admit under the client's span, sluice.enqueue under it, sluice.deliver under that", byName)
	}
	if admit.service != "sluice-gateway" {
		t.Errorf("service.name %q, want sluice-gateway", admit.service)
	}
	if want := "00-" + traceID + "-" + deliver.spanID + "-01"; workerParent != want {
		t.Errorf("worker got traceparent %q, want %q", workerParent, want)
	}
}
