package drainer

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
)

// traceWorker is a gRPC worker that passes the trace headers of each call
// to got.
type traceWorker struct {
	workerv1.UnimplementedWorkerServiceServer
	got chan [2]string
}

func (w *traceWorker) Process(ctx context.Context, _ *workerv1.ProcessRequest) (*workerv1.ProcessResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	w.got <- [2]string{first("traceparent"), first("tracestate")}
	return &workerv1.ProcessResponse{}, nil
}

// grpcTarget serves a traceWorker on a loopback port.
func grpcTarget(t *testing.T) (Handler, chan [2]string) {
	w := &traceWorker{got: make(chan [2]string, 1)}
	srv := grpc.NewServer()
	workerv1.RegisterWorkerServiceServer(srv, w)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(done) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop(); <-done })
	return NewGRPCWorker(conn), w.got
}

// webhookTarget serves an HTTP endpoint on a loopback port.
func webhookTarget(t *testing.T) (Handler, chan [2]string) {
	got := make(chan [2]string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- [2]string{r.Header.Get("traceparent"), r.Header.Get("tracestate")}
	}))
	t.Cleanup(srv.Close)
	return &Webhook{URL: srv.URL, Client: srv.Client()}, got
}

// TestWorkerContinuesTheTrace delivers a job whose envelope carries a
// submitter's trace context to a gRPC worker and to a webhook. With
// tracing off the worker gets that context unchanged; with tracing on it
// gets the sluice.deliver span's, in the same trace, a child of the stored
// context, with the tracestate kept.
func TestWorkerContinuesTheTrace(t *testing.T) {
	t.Parallel()
	const (
		traceID  = "0af7651916cd43dd8448eb211c80319c"
		stored   = "00-" + traceID + "-b7ad6b7169203331-01"
		vendor   = "vendor=abc"
		storedID = "b7ad6b7169203331"
	)
	for _, target := range []struct {
		name string
		make func(*testing.T) (Handler, chan [2]string)
	}{{"grpc", grpcTarget}, {"webhook", webhookTarget}} {
		for _, on := range []bool{false, true} {
			name := target.name + "/off"
			if on {
				name = target.name + "/on"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				tb := setup(t, oneLane)
				e := testEnvelope("t", "traced", time.Now())
				e.TraceContext = map[string]string{"traceparent": stored, "tracestate": vendor}
				tb.enqueue(t, tb.topo.ShardQueue("std", 0), e)
				handler, got := target.make(t)
				spans := tracetest.NewSpanRecorder()
				cfg := Config{Backend: tb.backend, Topology: tb.topo, Handler: handler}
				if on {
					cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
				}
				d := startDrainer(t, cfg)
				var headers [2]string
				select {
				case headers = <-got:
				case <-time.After(time.Minute):
					t.Fatal("no delivery within a minute")
				}
				stopCtx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				if err := d.Stop(stopCtx); err != nil {
					t.Fatal(err)
				}
				want := [2]string{stored, vendor}
				if on {
					ended := spans.Ended()
					if len(ended) != 1 || ended[0].Name() != "sluice.deliver" || ended[0].Parent().SpanID().String() != storedID {
						t.Fatalf("spans %v, want one sluice.deliver, a child of %s", ended, storedID)
					}
					want[0] = "00-" + traceID + "-" + ended[0].SpanContext().SpanID().String() + "-01"
				}
				if headers != want {
					t.Fatalf("worker got traceparent, tracestate %q, want %q", headers, want)
				}
			})
		}
	}
}
