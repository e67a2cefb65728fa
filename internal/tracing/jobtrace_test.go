package tracing_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/admin"
	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/drainer"
	"github.com/sluice-dev/sluice/gateway"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// worker is a gRPC worker on a loopback port. It holds the job whose
// payload is "hold" until release closes; the traced job fails its first
// call (retry), is refused on its second (dead-letter), and succeeds on
// its third (after a replay). It keeps the traceparent of every call.
type worker struct {
	workerv1.UnimplementedWorkerServiceServer
	held     chan struct{} // closed when the held job arrives
	release  chan struct{}
	releaser sync.Once

	mu    sync.Mutex
	calls []workerCall
}

type workerCall struct {
	jobID       string
	attempt     uint32
	traceparent string
}

func (w *worker) Process(ctx context.Context, req *workerv1.ProcessRequest) (*workerv1.ProcessResponse, error) {
	if string(req.GetPayload()) == "hold" {
		close(w.held)
		<-w.release
		return &workerv1.ProcessResponse{}, nil
	}
	if string(req.GetPayload()) == "filler" {
		return &workerv1.ProcessResponse{}, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	c := workerCall{jobID: req.GetJobId(), attempt: req.GetAttempt()}
	if v := md.Get("traceparent"); len(v) == 1 {
		c.traceparent = v[0]
	}
	w.mu.Lock()
	w.calls = append(w.calls, c)
	n := len(w.calls)
	w.mu.Unlock()
	switch n {
	case 1:
		return nil, status.Error(grpccodes.Unavailable, "not now")
	case 2:
		return nil, status.Error(grpccodes.FailedPrecondition, "cannot process this job")
	}
	return &workerv1.ProcessResponse{}, nil
}

func (w *worker) free() { w.releaser.Do(func() { close(w.release) }) }

func (w *worker) snapshot() []workerCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// serveGRPC serves srv on a loopback port until the test ends and returns
// a client connection to it.
func serveGRPC(t *testing.T, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
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
	return conn
}

// waitFor polls cond until it holds or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSpanTreeOfOneJob follows one job through the real gateway, a
// drainer on the embedded backend and a gRPC worker: submitted under a
// client span, spilled (its tenant is at its in-flight limit), retried
// once, dead-lettered, replayed and delivered. Every span is in the
// client's trace, in the tree the package comment draws, and each call to
// the worker carries its sluice.deliver span as the parent.
//
// Replay spans go to the global provider, so this test sets it and does
// not run in parallel.
func TestSpanTreeOfOneJob(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	otel.SetTracerProvider(tp)

	topo := topology.Default()
	topo.MaxReceiveCount = 10 // no requeue while the job waits on the spillover queue
	for i := range topo.Lanes {
		// One shard: the quiet tenant's job is read from the traced job's
		// shard, so reading past acme there is worth a move (the lookout
		// judges each shard by the tenants read from it).
		topo.Lanes[i].Shards = 1
	}
	backend, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "q.db"), embeddedqueue.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	if err := backend.EnsureQueues(t.Context(), topo.Specs()); err != nil {
		t.Fatal(err)
	}
	tenants, err := tenant.Parse([]byte("tenants:\n  - {id: acme, tier: standard, api_keys: [acme-key]}\n  - {id: calm, tier: standard, api_keys: [calm-key]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	depths := depth.New(depth.Config{Backend: backend, Queues: topo.Names(), Logger: quiet})
	if err := depths.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}

	gw, err := gateway.New(gateway.Config{
		Backend: backend, Topology: topo, Tenants: func() *tenant.Config { return tenants },
		Depth: depths, Logger: quiet, TracerProvider: tp,
	})
	if err != nil {
		t.Fatal(err)
	}
	auth := func() gateway.Authenticator { return tenants }
	gwSrv := serve.NewServer(quiet, []grpc.UnaryServerInterceptor{gateway.UnaryAuth(auth)}, nil, grpc.InTapHandle(gateway.TapAuth(auth, nil)))
	ingestv1.RegisterIngestServiceServer(gwSrv.GRPC, gw)
	client := ingestv1.NewIngestServiceClient(serveGRPC(t, gwSrv.GRPC))

	w := &worker{held: make(chan struct{}), release: make(chan struct{})}
	wSrv := grpc.NewServer()
	workerv1.RegisterWorkerServiceServer(wSrv, w)
	workerConn := serveGRPC(t, wSrv)

	d, err := drainer.New(drainer.Config{
		Backend: backend, Topology: topo, Handler: drainer.NewGRPCWorker(workerConn), Concurrency: 4,
		Limits:    func(string) scheduler.Limits { return scheduler.Limits{MaxInFlight: 1} },
		ReadAhead: 1,
		Policy:    sideliner.Policy{RetryBase: 10 * time.Millisecond, RetryCap: 50 * time.Millisecond, DeferDelay: 50 * time.Millisecond},
		PollWait:  200 * time.Millisecond, TracerProvider: tp, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		w.free()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	adminSrv := admin.NewServer(backend, topo, quiet)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminSrv.Stop(ctx); err != nil {
			t.Error(err)
		}
	})

	// A first job takes the tenant's only in-flight slot.
	submitAs := func(ctx context.Context, key, payload string) string {
		t.Helper()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
		resp, err := client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetJobId()
	}
	submit := func(ctx context.Context, payload string) string { return submitAs(ctx, "acme-key", payload) }
	submit(t.Context(), "hold")
	<-w.held
	// A second waits in the tenant's read-ahead (one job), so the next
	// is spilled.
	submit(t.Context(), "filler")
	waitFor(t, "the filler held", func() bool { return d.Held() == 1 })
	// A quiet tenant's job is read and delivered: reading past a full
	// tenant is worth a move only while one may stand behind it
	// (sideliner.Lookout).
	submitAs(t.Context(), "calm-key", "filler")
	waitFor(t, "the quiet job delivered", func() bool { return d.Counts().Delivered == 1 })

	// The traced job: the client's span context goes out as traceparent.
	ctx, clientSpan := tp.Tracer("test").Start(t.Context(), "client.submit", trace.WithSpanKind(trace.SpanKindClient))
	jobID := submit(tracing.AppendOutgoing(ctx, tracing.Inject(ctx)), "traced")
	clientSpan.End()
	waitFor(t, "the spill", func() bool { return d.Counts().Spilled == 1 })
	w.free()
	waitFor(t, "the dead-letter", func() bool { return d.Counts().DeadLettered == 1 })

	resp, err := adminSrv.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"acme"}}, RatePerSecond: 1000})
	if err != nil {
		t.Fatal(err)
	}
	replayID := resp.GetReplay().GetId()
	// hold, filler, the quiet job and the replayed traced job.
	waitFor(t, "the deliveries", func() bool { return d.Counts().Delivered == 4 })
	stop() // every span has ended once the drainer stops

	traceID := clientSpan.SpanContext().TraceID()
	var mine []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.SpanContext().TraceID() == traceID {
			mine = append(mine, s)
		}
	}
	slices.SortStableFunc(mine, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })

	// Deferrals depend on timing (the job may be read from the spillover
	// queue before the held job finishes): check them apart.
	byName := func(name string) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range mine {
			if s.Name() == name {
				out = append(out, s)
			}
		}
		return out
	}
	var tree []sdktrace.ReadOnlySpan
	for _, s := range mine {
		if s.Name() != tracing.SpanDefer {
			tree = append(tree, s)
		}
	}
	var names []string
	for _, s := range tree {
		names = append(names, s.Name())
	}
	wantNames := []string{
		"client.submit", "sluice.admit", "sluice.enqueue", "sluice.move", "sluice.deliver", "sluice.move",
		"sluice.deliver", "sluice.move", "sluice.replay", "sluice.deliver",
	}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("spans of the job's trace, by start time:\n%s\nwant %v", describe(mine), wantNames)
	}
	clientSub, admit, enqueue := tree[0], tree[1], tree[2]
	spill, deliver1, retry, deliver2, deadLetter, replay, deliver3 := tree[3], tree[4], tree[5], tree[6], tree[7], tree[8], tree[9]

	lane, _ := topo.Lane("standard")
	var shards []string
	for i := range lane.Shards {
		shards = append(shards, topo.ShardQueue("standard", i))
	}
	shard := attrs(enqueue)["sluice.queue"]
	if !slices.Contains(shards, shard) {
		t.Fatalf("enqueue span's queue %q is not one of the lane's shards %v", shard, shards)
	}
	spillover, dlq := topo.SpilloverQueue("standard"), topo.DLQ("standard")
	const refused = "permanent_failure: worker: cannot process this job (FailedPrecondition)"
	job := map[string]string{"sluice.job_id": jobID, "sluice.tenant": "acme", "sluice.lane": "standard"}
	with := func(extra ...string) map[string]string {
		m := map[string]string{}
		for k, v := range job {
			m[k] = v
		}
		for i := 0; i < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	tests := []struct {
		name   string
		span   sdktrace.ReadOnlySpan
		parent sdktrace.ReadOnlySpan
		kind   trace.SpanKind
		attrs  map[string]string
		failed bool
	}{
		{"admit", admit, clientSub, trace.SpanKindServer, with("sluice.outcome", "admitted"), false},
		{"enqueue", enqueue, admit, trace.SpanKindProducer, with("sluice.queue", shard), false},
		{"spill", spill, enqueue, trace.SpanKindInternal, with("sluice.action", "spill", "sluice.reason", "read_ahead_full",
			"sluice.queue", shard, "sluice.destination", spillover, "sluice.attempt", "0"), false},
		{"deliver 1", deliver1, enqueue, trace.SpanKindConsumer, with("sluice.attempt", "1", "sluice.queue", spillover, "sluice.outcome", "retry"), true},
		{"retry", retry, deliver1, trace.SpanKindInternal, with("sluice.action", "retry", "sluice.reason", "retryable_failure",
			"sluice.queue", spillover, "sluice.destination", spillover, "sluice.attempt", "1"), false},
		{"deliver 2", deliver2, enqueue, trace.SpanKindConsumer, with("sluice.attempt", "2", "sluice.queue", spillover, "sluice.outcome", "dead_letter"), true},
		{"dead letter", deadLetter, deliver2, trace.SpanKindInternal, with("sluice.action", "dead_letter", "sluice.reason", refused,
			"sluice.queue", spillover, "sluice.destination", dlq, "sluice.attempt", "2"), false},
		{"replay", replay, enqueue, trace.SpanKindInternal, with("sluice.replay_id", replayID, "sluice.reason", refused, "sluice.queue", dlq,
			"sluice.destination", shard, "sluice.attempt", "2"), false},
		{"deliver after replay", deliver3, enqueue, trace.SpanKindConsumer, with("sluice.attempt", "1", "sluice.queue", shard, "sluice.outcome", "ack"), false},
	}
	for _, tt := range tests {
		if got := tt.span.Parent().SpanID(); got != tt.parent.SpanContext().SpanID() {
			t.Errorf("%s: parent %s, want %s (%s)", tt.name, got, tt.parent.SpanContext().SpanID(), tt.parent.Name())
		}
		if tt.span.SpanKind() != tt.kind {
			t.Errorf("%s: kind %s, want %s", tt.name, tt.span.SpanKind(), tt.kind)
		}
		got := attrs(tt.span)
		delete(got, "sluice.delay_ms") // jittered; present on the retry (below)
		if !maps.Equal(got, tt.attrs) {
			t.Errorf("%s: attributes\n%v\nwant\n%v", tt.name, got, tt.attrs)
		}
		if failed := tt.span.Status().Code == codes.Error; failed != tt.failed {
			t.Errorf("%s: status %v, want failed=%t", tt.name, tt.span.Status(), tt.failed)
		}
	}
	if _, ok := attrs(retry)["sluice.delay_ms"]; !ok {
		t.Error("retry span has no sluice.delay_ms")
	}
	for _, s := range byName(tracing.SpanDefer) {
		if s.Parent().SpanID() != enqueue.SpanContext().SpanID() || attrs(s)["sluice.action"] != "defer" || attrs(s)["sluice.reason"] != "read_ahead_full" {
			t.Errorf("defer span %v with parent %s, want a child of enqueue read_ahead_full", attrs(s), s.Parent().SpanID())
		}
	}

	// Each worker call carries its delivery span as parent, in the same
	// trace.
	calls := w.snapshot()
	delivers := []sdktrace.ReadOnlySpan{deliver1, deliver2, deliver3}
	if len(calls) != len(delivers) {
		t.Fatalf("worker calls %+v, want %d", calls, len(delivers))
	}
	for i, c := range calls {
		want := fmt.Sprintf("00-%s-%s-01", traceID, delivers[i].SpanContext().SpanID())
		if c.jobID != jobID || c.traceparent != want {
			t.Errorf("worker call %d: job %s traceparent %q, want job %s traceparent %q", i+1, c.jobID, c.traceparent, jobID, want)
		}
	}
	t.Logf("span tree of one job:\n%s", describe(mine))
}

// attrs returns a span's attributes as strings.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func describe(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s span=%s parent=%s %v %v\n", s.Name(), s.SpanContext().SpanID(), s.Parent().SpanID(), attrs(s), s.Status())
	}
	return b.String()
}
