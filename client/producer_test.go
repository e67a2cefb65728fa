package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/client"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// callCounter counts the SubmitBatch calls and jobs a client makes, with
// a gRPC client interceptor.
type callCounter struct{ calls, jobs atomic.Int64 }

func (c *callCounter) option() grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if b, ok := req.(*ingestv1.SubmitBatchRequest); ok {
			c.calls.Add(1)
			c.jobs.Add(int64(len(b.GetJobs())))
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

func newProducer(t *testing.T, c *client.Client, cfg client.ProducerConfig) *client.Producer {
	t.Helper()
	p, err := c.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return p
}

// TestProducerMergesSends: 256 goroutines each sending one job at a time
// share few SubmitBatch calls, and every job gets its own id.
func TestProducerMergesSends(t *testing.T) {
	t.Parallel()
	var cc callCounter
	c := newClient(t, gatewayAddr(t), "acme-key", client.Config{DialOptions: []grpc.DialOption{cc.option()}})
	p := newProducer(t, c, client.ProducerConfig{})
	const senders, each = 256, 4
	var mu sync.Mutex
	ids := map[string]bool{}
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				f, err := p.Send(t.Context(), client.Job{Payload: fmt.Appendf(nil, "job %d/%d", g, i)})
				if err != nil {
					t.Error(err)
					return
				}
				res, err := f.Wait(t.Context())
				if err != nil || res.JobID == "" || res.Duplicate || res.Attempts != 1 || res.IdempotencyKey == "" {
					t.Errorf("job %d/%d: %+v, %v", g, i, res, err)
					return
				}
				mu.Lock()
				ids[res.JobID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(ids) != senders*each {
		t.Fatalf("%d distinct ids, want %d", len(ids), senders*each)
	}
	calls := cc.calls.Load()
	t.Logf("%d jobs in %d SubmitBatch calls (%.1f per call)", senders*each, calls, float64(senders*each)/float64(calls))
	if calls > senders*each/4 {
		t.Fatalf("%d calls for %d jobs: the sends were not merged", calls, senders*each)
	}
}

// TestProducerResults: per job, an accepted id, a duplicate of an earlier
// job with the same key, or a typed refusal, without failing the others
// of its batch.
func TestProducerResults(t *testing.T) {
	t.Parallel()
	c := newClient(t, gatewayAddr(t), "acme-key", client.Config{})
	p := newProducer(t, c, client.ProducerConfig{Linger: 50 * time.Millisecond})
	ctx := t.Context()
	first, err := p.Send(ctx, client.Job{Payload: []byte("order 42"), IdempotencyKey: "order-42"})
	if err != nil {
		t.Fatal(err)
	}
	firstRes, err := first.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jobs := []client.Job{
		{Payload: []byte("order 42 again"), IdempotencyKey: "order-42"},
		{Payload: nil}, // invalid
		{Payload: []byte("x"), TTL: time.Second, Delay: time.Minute}, // invalid
		{Payload: []byte("fine")},
	}
	futs := make([]*client.Future, len(jobs))
	for i, j := range jobs {
		if futs[i], err = p.Send(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, f := range futs {
		select {
		case <-f.Done():
		default:
			t.Fatalf("job %d not settled after Flush", i)
		}
	}
	res, err := futs[0].Wait(ctx)
	if err != nil || !res.Duplicate || res.JobID != firstRes.JobID {
		t.Errorf("repeat of order-42: %+v, %v; want a duplicate of %s", res, err, firstRes.JobID)
	}
	for i, field := range map[int]string{1: "payload", 2: "ttl"} {
		_, err := futs[i].Wait(ctx)
		var inv *client.InvalidArgumentError
		if !errors.As(err, &inv) || len(inv.Violations) != 1 || inv.Violations[0].Field != field {
			t.Errorf("job %d: %v, want an InvalidArgumentError on %s", i, err, field)
		}
	}
	if res, err := futs[3].Wait(ctx); err != nil || res.JobID == "" || res.Duplicate {
		t.Errorf("valid job: %+v, %v", res, err)
	}
}

// TestProducerPacesRate: a producer far over the tenant's rate (burst
// 100, then 1000/s) slows to it: every job is accepted, nearly all on
// their first retry, at the time the gateway promised.
func TestProducerPacesRate(t *testing.T) {
	t.Parallel()
	var cc callCounter
	c := newClient(t, gatewayAddr(t), "bursty-key", client.Config{DialOptions: []grpc.DialOption{cc.option()}})
	p := newProducer(t, c, client.ProducerConfig{})
	const n = 600
	futs := make([]*client.Future, n)
	start := time.Now()
	for i := range futs {
		f, err := p.Send(t.Context(), client.Job{Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		futs[i] = f
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	attempts, most := 0, 0
	for i, f := range futs {
		res, err := f.Wait(t.Context())
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		attempts += res.Attempts
		most = max(most, res.Attempts)
	}
	refusals := float64(attempts-n) / n
	t.Logf("%d jobs, burst 100, 1000/s: %s, %.2f refusals per job, at most %d attempts, %d calls carrying %d jobs", n, took.Round(time.Millisecond), refusals, most, cc.calls.Load(), cc.jobs.Load())
	// 500 jobs over the burst need 500 ms of tokens.
	if took < 500*time.Millisecond || refusals > 1.5 {
		t.Fatalf("%d jobs in %s with %.2f refusals per job; want ≥ 500ms and ≤ 1.5", n, took, refusals)
	}
}

// TestProducerClose: Send blocks at MaxPending and fails after Close; a
// Close whose context ends abandons the jobs still waiting.
func TestProducerClose(t *testing.T) {
	t.Parallel()
	// tiny admits one job, then one per 1000 s; MaxRetryWait lets the
	// producer wait that out.
	c := newClient(t, gatewayAddr(t), "tiny-key", client.Config{MaxRetryWait: time.Hour})
	p, err := c.NewProducer(client.ProducerConfig{MaxPending: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	f1, err := p.Send(ctx, client.Job{Payload: []byte("accepted")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	f2, err := p.Send(ctx, client.Job{Payload: []byte("waits 1000 s")})
	if err != nil {
		t.Fatal(err)
	}
	f3, err := p.Send(ctx, client.Job{Payload: []byte("waits behind it")})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.Send(short, client.Job{Payload: []byte("no room")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send beyond MaxPending: %v, want DeadlineExceeded", err)
	}
	short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := p.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close: %v, want DeadlineExceeded", err)
	}
	for i, f := range []*client.Future{f2, f3} {
		if _, err := f.Wait(ctx); !errors.Is(err, client.ErrProducerClosed) {
			t.Errorf("job %d left at close: %v, want ErrProducerClosed", i+2, err)
		}
	}
	if _, err := p.Send(ctx, client.Job{Payload: []byte("late")}); !errors.Is(err, client.ErrProducerClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestProducerRetriesKeepKeys: after a whole call fails UNAVAILABLE the
// producer backs off and sends the same jobs with the same keys, and a job
// refused for rate is retried after its hint, with its key.
func TestProducerRetriesKeepKeys(t *testing.T) {
	t.Parallel()
	// The first call, a alone, is held until b is sent, so b waits for
	// it and the retry of a carries b too. b's linger outlasts any
	// answer: with 20ms, on a busy machine b left alone before the first
	// call's answer came back.
	entered, release := make(chan struct{}), make(chan struct{})
	s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
		switch n {
		case 0:
			close(entered)
			<-release
			return nil, errUnavailable
		case 1:
			return batchAnswer(req, nil, quotaStatus("rate", 30*time.Millisecond)), nil
		}
		return batchAnswer(req), nil
	}}
	serveScripted(t, s)
	p := newProducer(t, dial(t, s.addr, fastRetries), client.ProducerConfig{Linger: time.Minute})
	ctx := t.Context()
	a, err := p.Send(ctx, client.Job{Payload: []byte("a"), IdempotencyKey: "key-a"})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	b, err := p.Send(ctx, client.Job{Payload: []byte("b")})
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := a.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls := s.recorded()
	keys := make([]string, len(calls))
	for i, c := range calls {
		keys[i] = fmt.Sprint(c.keys)
	}
	want := []string{
		"[key-a]",
		fmt.Sprintf("[key-a %s]", rb.IdempotencyKey),
		fmt.Sprintf("[%s]", rb.IdempotencyKey),
	}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("calls carried %v, want %v", keys, want)
	}
	if ra.Attempts != 2 || rb.Attempts != 2 || ra.JobID != "key-a-id" || rb.JobID != rb.IdempotencyKey+"-id" {
		t.Fatalf("results %+v and %+v", ra, rb)
	}
	if gap := calls[2].at.Sub(calls[1].at); gap < 30*time.Millisecond {
		t.Fatalf("rate-refused job retried after %s, before its hint of 30ms", gap)
	}
}

// batchGate is a gRPC client interceptor that records the jobs of each
// SubmitBatch call and, when hold is set, keeps the first call from
// leaving the client until release is closed.
type batchGate struct {
	hold             bool
	entered, release chan struct{}
	once             sync.Once

	mu    sync.Mutex
	sizes []int
}

func newBatchGate(hold bool) *batchGate {
	return &batchGate{hold: hold, entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *batchGate) option() grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if b, ok := req.(*ingestv1.SubmitBatchRequest); ok {
			g.mu.Lock()
			first := len(g.sizes) == 0
			g.sizes = append(g.sizes, len(b.GetJobs()))
			g.mu.Unlock()
			if first && g.hold {
				close(g.entered)
				<-g.release
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// open lets the held call go; safe to call twice.
func (g *batchGate) open() { g.once.Do(func() { close(g.release) }) }

func (g *batchGate) calls() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sizes)
}

// TestProducerDispatch: with no call under way a batch goes at once,
// however long Linger is; while one is under way, jobs linger and merge
// into batches (full ones going at once), and go out together once the
// call ends.
func TestProducerDispatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// holdFirst keeps a first call of one job under way while the
		// jobs are sent.
		holdFirst bool
		jobs      int // sent one after another, each waited for unless holdFirst
		maxBatch  int
		want      []int // jobs per call, the first call's first; the others sorted
	}{
		{name: "idle: each job at once", jobs: 3, want: []int{1, 1, 1}},
		{name: "busy: jobs merge behind the call", holdFirst: true, jobs: 20, want: []int{1, 20}},
		{name: "busy: full batches go at once", holdFirst: true, jobs: 25, maxBatch: 10, want: []int{1, 5, 10, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newBatchGate(tt.holdFirst)
			c := newClient(t, gatewayAddr(t), "acme-key", client.Config{DialOptions: []grpc.DialOption{g.option()}})
			// An hour of linger: a job that waited for it fails the test.
			p := newProducer(t, c, client.ProducerConfig{Linger: time.Hour, MaxBatchJobs: tt.maxBatch})
			t.Cleanup(g.open) // before the producer's Close
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var futs []*client.Future
			send := func(i int) {
				f, err := p.Send(ctx, client.Job{Payload: fmt.Appendf(nil, "job %d", i)})
				if err != nil {
					t.Fatal(err)
				}
				futs = append(futs, f)
				if !tt.holdFirst {
					if _, err := f.Wait(ctx); err != nil {
						t.Fatalf("job %d: %v", i, err)
					}
				}
			}
			if tt.holdFirst {
				send(-1)
				select {
				case <-g.entered:
				case <-ctx.Done():
					t.Fatal("a lone job was not sent at once")
				}
			}
			for i := range tt.jobs {
				send(i)
			}
			g.open()
			for i, f := range futs {
				if res, err := f.Wait(ctx); err != nil || res.JobID == "" {
					t.Fatalf("job %d: %+v, %v", i, res, err)
				}
			}
			got := g.calls()
			slices.Sort(got[1:])
			if !slices.Equal(got, tt.want) {
				t.Fatalf("calls of %v jobs, want %v", got, tt.want)
			}
		})
	}
}

// TestProducerCloseWithEndedContext: Flush and Close with a context that
// has ended return nil when every job sent was settled already: nothing
// was abandoned. They raced the ended context against the settled jobs
// and returned its error half the time, as if jobs had been given up.
func TestProducerCloseWithEndedContext(t *testing.T) {
	t.Parallel()
	c := newClient(t, gatewayAddr(t), "acme-key", client.Config{})
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 20 {
		p, err := c.NewProducer(client.ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.Send(t.Context(), client.Job{Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(ended); err != nil {
			t.Errorf("round %d: flush with every job settled: %v", i, err)
		}
		if err := p.Close(ended); err != nil {
			t.Errorf("round %d: close with every job settled: %v", i, err)
		}
	}
}

// TestFutureWaitWithEndedContext: Wait on a settled job returns its
// outcome even with a context that has ended. It chose at random between
// the two, so a caller collecting outcomes after a shutdown began was
// told half its accepted jobs had not been (and might send them again).
func TestFutureWaitWithEndedContext(t *testing.T) {
	t.Parallel()
	c := newClient(t, gatewayAddr(t), "acme-key", client.Config{})
	p := newProducer(t, c, client.ProducerConfig{})
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 20 {
		f, err := p.Send(t.Context(), client.Job{Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		<-f.Done()
		if res, err := f.Wait(ended); err != nil || res.JobID == "" {
			t.Errorf("round %d: wait on a settled job: %+v, %v", i, res, err)
		}
	}
}
