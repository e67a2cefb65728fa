package gateway

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/envelope"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type testBundle struct {
	client  ingestv1.IngestServiceClient
	conn    *grpc.ClientConn
	health  healthpb.HealthClient
	backend queue.Backend
	topo    topology.Topology
}

// setup serves a gateway on a loopback port over a real embedded backend.
func setup(t testing.TB) *testBundle {
	return setupWith(t, Config{})
}

// setupWith is setup with some Config fields set (the required ones are
// filled in).
func setupWith(t testing.TB, cfg Config) *testBundle {
	t.Helper()
	return setupWrapped(t, cfg, nil)
}

// setupWrapped is setupWith with the gateway's backend wrapped by wrap
// (when not nil); testBundle.backend stays the real one.
func setupWrapped(t testing.TB, cfg Config, wrap func(queue.Backend) queue.Backend) *testBundle {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	topo := cfg.Topology
	if len(topo.Lanes) == 0 {
		topo = topology.Default()
	}
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "q.db"), embeddedqueue.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.EnsureQueues(t.Context(), topo.Specs()); err != nil {
		t.Fatal(err)
	}
	tenants, err := tenant.Parse([]byte("tenants:\n  - {id: acme, tier: premium, api_keys: [acme-key-1]}\n  - {id: tiny, tier: free, api_keys: [tiny-key-1], submit_burst: 3, submit_rate: 0.001}\n  - {id: bench, tier: premium, api_keys: [bench-key-1], submit_rate: 1e9, submit_burst: 1000000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	depths := depth.New(depth.Config{Backend: b, Queues: topo.Names(), Logger: log})
	if err := depths.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	cfg.Backend, cfg.Topology, cfg.Tenants, cfg.Depth = b, topo, func() *tenant.Config { return tenants }, depths
	cfg.Logger = cmp.Or(cfg.Logger, log)
	if wrap != nil {
		cfg.Backend = wrap(b)
	}
	gw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	auth := func() Authenticator { return tenants }
	srv := serve.NewServer(log, []grpc.UnaryServerInterceptor{UnaryAuth(auth)}, []grpc.StreamServerInterceptor{StreamAuth(auth)},
		grpc.InTapHandle(TapAuth(auth, cfg.Metrics)))
	ingestv1.RegisterIngestServiceServer(srv.GRPC, gw)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, lis, 0); close(done) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); <-done })
	return &testBundle{client: ingestv1.NewIngestServiceClient(conn), conn: conn, health: healthpb.NewHealthClient(conn), backend: b, topo: topo}
}

func key(ctx context.Context, k string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+k)
}

func TestHealthNeedsNoKey(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	resp, err := tb.health.Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", resp, err)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, tc := range []struct {
		md   []string
		want string // in the message
	}{
		{nil, "missing API key"},
		{[]string{"authorization", "Bearer nope-nope"}, "unknown API key"},
		{[]string{"authorization", "Basic acme-key-1"}, "missing API key"},
		{[]string{"authorization", "Bearer"}, "missing API key"},
		// Two headers, even both valid: which counts would depend on their order.
		{[]string{"authorization", "Bearer acme-key-1", "authorization", "Bearer acme-key-1"}, "more than one authorization header"},
		{[]string{"authorization", "Bearer acme-key-1", "authorization", "Bearer nope-nope"}, "more than one authorization header"},
	} {
		ctx := t.Context()
		if tc.md != nil {
			ctx = metadata.AppendToOutgoingContext(ctx, tc.md...)
		}
		_, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("x")})
		if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("metadata %v: %v, want UNAUTHENTICATED saying %q", tc.md, err, tc.want)
		}
	}
}

// rawCodec sends and receives bytes as they are, to put a malformed
// message on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

// TestAuthBeforeBody checks that a call without a valid key is refused
// from its headers, before its body is decoded: a body that is not a
// SubmitRequest gets UNAUTHENTICATED without a key and a decoding error
// only with one.
func TestAuthBeforeBody(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	garbage := []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	call := func(ctx context.Context) error {
		var out []byte
		return tb.conn.Invoke(ctx, ingestv1.IngestService_Submit_FullMethodName, &garbage, &out, grpc.ForceCodec(rawCodec{}))
	}
	if err := call(t.Context()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("garbage without a key: %v, want UNAUTHENTICATED", err)
	}
	if err := call(key(t.Context(), "nope-nope-nope")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("garbage with an unknown key: %v, want UNAUTHENTICATED", err)
	}
	if err := call(key(t.Context(), "acme-key-1")); status.Code(err) == codes.Unauthenticated || err == nil {
		t.Fatalf("garbage with a valid key: %v, want a decoding error", err)
	}
}

// TestSubmitStoresEnvelope checks what an OK means: the job is on one of
// the tenant's shard queues, with the tenant taken from the key.
func TestSubmitStoresEnvelope(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := metadata.AppendToOutgoingContext(key(t.Context(), "acme-key-1"), "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	resp, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("hello"), Attributes: map[string]string{"k": "v"}, IdempotencyKey: "idem"})
	if err != nil {
		t.Fatal(err)
	}
	var found *envelope.Envelope
	for i := range 4 {
		msgs, err := tb.backend.Receive(t.Context(), &queue.ReceiveParams{Queue: tb.topo.ShardQueue("premium", i), Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			env, err := envelope.Decode(m.Body)
			if err != nil {
				t.Fatal(err)
			}
			found = env
		}
	}
	if found == nil || found.GetJobId() != resp.GetJobId() || found.GetTenant() != "acme" || found.GetLane() != "premium" ||
		string(found.GetPayload()) != "hello" || found.GetAttributes()["k"] != "v" || found.GetIdempotencyKey() != "idem" ||
		found.GetTraceContext()["traceparent"] == "" || found.GetEnqueuedAt() == nil {
		t.Fatalf("stored envelope %v for job %s", found, resp.GetJobId())
	}
}

func TestSubmitBatchPerItemResults(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := key(t.Context(), "tiny-key-1") // burst 3, then no tokens for a long time
	resp, err := tb.client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: []*ingestv1.SubmitRequest{
		{Payload: []byte("a"), IdempotencyKey: "k1"},
		{}, // invalid
		{Payload: []byte("b"), IdempotencyKey: "k1"}, // repeat of item 0 in the same batch
		{Payload: []byte("c")},
		{Payload: []byte("d")},
		{Payload: []byte("e")}, // over the burst
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	if len(r) != 6 {
		t.Fatalf("%d results", len(r))
	}
	if r[0].GetJobId() == "" || r[0].GetDuplicate() || r[0].GetError() != nil {
		t.Errorf("item 0: %v", r[0])
	}
	if e := r[1].GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument || e.GetFieldViolations()[0].GetField() != "jobs[1].payload" {
		t.Errorf("item 1: %v", r[1])
	}
	if r[2].GetJobId() != r[0].GetJobId() || !r[2].GetDuplicate() {
		t.Errorf("item 2: %v, want a duplicate of %s", r[2], r[0].GetJobId())
	}
	if r[3].GetError() != nil || r[4].GetError() != nil {
		t.Errorf("items 3-4: %v %v", r[3], r[4])
	}
	if e := r[5].GetError(); codes.Code(e.GetCode()) != codes.ResourceExhausted || e.GetRetryDelay().AsDuration() <= 0 {
		t.Errorf("item 5: %v, want RESOURCE_EXHAUSTED with a retry delay", r[5])
	}
	for _, n := range []int{0, 501} {
		if _, err := tb.client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: make([]*ingestv1.SubmitRequest, n)}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("batch of %d: %v", n, err)
		}
	}
}

// TestEnvelopeOverMessageLimit refuses a job whose envelope, with
// attributes, would not fit the queue's message limit, before the backend
// sees it.
func TestEnvelopeOverMessageLimit(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, Config{MaxMessageBytes: 2000})
	attrs := map[string]string{}
	for i := range 3 {
		attrs[fmt.Sprint("k", i)] = strings.Repeat("v", 1000)
	}
	_, err := tb.client.Submit(key(t.Context(), "acme-key-1"), &ingestv1.SubmitRequest{Payload: []byte("small"), Attributes: attrs})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "over the message limit of 2000") {
		t.Fatalf("err = %v, want INVALID_ARGUMENT naming the message limit", err)
	}
	// The refused job cost no token and nothing was stored.
	if _, err := tb.client.Submit(key(t.Context(), "acme-key-1"), &ingestv1.SubmitRequest{Payload: []byte("small")}); err != nil {
		t.Fatal(err)
	}
}

// TestEnvelopeOverMessageLimitInBatch: within a SubmitBatch the refusal
// of a job whose envelope is over the message limit names that job's
// payload, as every other field violation of a batch does.
func TestEnvelopeOverMessageLimitInBatch(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, Config{MaxMessageBytes: 2000})
	attrs := map[string]string{}
	for i := range 3 {
		attrs[fmt.Sprint("k", i)] = strings.Repeat("v", 1000)
	}
	resp, err := tb.client.SubmitBatch(key(t.Context(), "acme-key-1"), &ingestv1.SubmitBatchRequest{Jobs: []*ingestv1.SubmitRequest{
		{Payload: []byte("fits")},
		{Payload: []byte("small"), Attributes: attrs},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults()[0]; r.GetError() != nil || r.GetJobId() == "" {
		t.Errorf("job 0: %v, want stored", r)
	}
	e := resp.GetResults()[1].GetError()
	if codes.Code(e.GetCode()) != codes.InvalidArgument || len(e.GetFieldViolations()) != 1 || e.GetFieldViolations()[0].GetField() != "jobs[1].payload" ||
		!strings.HasPrefix(e.GetMessage(), "invalid job: jobs[1].payload ") {
		t.Errorf("job 1: %v, want INVALID_ARGUMENT naming jobs[1].payload", e)
	}
}

// sendOnly hides every capability of the backend but queue.Backend's
// methods (no SendMany, no KeyStore).
type sendOnly struct{ queue.Backend }

// TestSubmitBatchOneCommit: a batch of many times queue.MaxBatch jobs is
// stored in one commit when the backend is a queue.MultiSender, and
// through several Sends otherwise.
func TestSubmitBatchOneCommit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		wrap      func(queue.Backend) queue.Backend
		oneCommit bool
	}{
		{name: "MultiSender", oneCommit: true},
		// At least 10 Sends, 8 at a time: two commits at least.
		{name: "Send only", wrap: func(b queue.Backend) queue.Backend { return sendOnly{b} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setupWrapped(t, Config{}, tt.wrap)
			eq := tb.backend.(*embeddedqueue.Backend)
			jobs := make([]*ingestv1.SubmitRequest, 100)
			for i := range jobs {
				jobs[i] = &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "job %d", i), IdempotencyKey: fmt.Sprint("k", i)}
			}
			before := eq.CommitStats()
			resp, err := tb.client.SubmitBatch(key(t.Context(), "bench-key-1"), &ingestv1.SubmitBatchRequest{Jobs: jobs})
			if err != nil {
				t.Fatal(err)
			}
			commits := eq.CommitStats().Commits - before.Commits
			for i, r := range resp.GetResults() {
				if r.GetError() != nil || r.GetJobId() == "" {
					t.Fatalf("job %d: %v", i, r)
				}
			}
			lane := tb.topo.Lanes[slices.IndexFunc(tb.topo.Lanes, func(l topology.Lane) bool { return l.Name == "premium" })]
			var stored int64
			used := 0
			for i := range lane.Shards {
				s, err := tb.backend.Stats(t.Context(), &queue.StatsParams{Queues: []string{tb.topo.ShardQueue(lane.Name, i)}})
				if err != nil {
					t.Fatal(err)
				}
				stored += s[0].Visible
				if s[0].Visible > 0 {
					used++
				}
			}
			if stored != int64(len(jobs)) {
				t.Fatalf("%d jobs stored, want %d", stored, len(jobs))
			}
			switch {
			case tt.oneCommit && commits != 1:
				t.Errorf("%d jobs in %d shard queues took %d commits, want 1", len(jobs), used, commits)
			case !tt.oneCommit && commits < 2:
				t.Errorf("%d commits for at least %d Sends, 8 at a time", commits, len(jobs)/queue.MaxBatch)
			}
		})
	}
}

// TestOversizedJobIsBadInputWhateverTheTokens: a tenant out of tokens
// that sends a job too large for any message got RESOURCE_EXHAUSTED with
// a retry hint (the bucket answered before the size was known), and the
// retry could never succeed. It is INVALID_ARGUMENT, unary and in a batch,
// also when the payload alone fits and the envelope's own fields push it
// over (that was found only once encoded, after the bucket).
func TestOversizedJobIsBadInputWhateverTheTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		job  *ingestv1.SubmitRequest
	}{
		{"payload over the limit", &ingestv1.SubmitRequest{Payload: []byte(strings.Repeat("p", 2001))}},
		{"envelope over the limit", &ingestv1.SubmitRequest{Payload: []byte(strings.Repeat("p", 1990)), IdempotencyKey: "order-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setupWith(t, Config{MaxMessageBytes: 2000})
			ctx := key(t.Context(), "tiny-key-1")
			for range 3 { // tiny's whole burst
				if _, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("small")}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := tb.client.Submit(ctx, tt.job)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "over the message limit of 2000") {
				t.Errorf("unary: %v, want INVALID_ARGUMENT naming the message limit", err)
			}
			resp, err := tb.client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: []*ingestv1.SubmitRequest{tt.job}})
			if err != nil {
				t.Fatal(err)
			}
			if e := resp.GetResults()[0].GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument || e.GetFieldViolations()[0].GetField() != "jobs[0].payload" {
				t.Errorf("batch: %v, want INVALID_ARGUMENT naming jobs[0].payload", e)
			}
		})
	}
}
