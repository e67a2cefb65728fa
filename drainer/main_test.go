package drainer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
	"github.com/sluice-dev/sluice/topology"
)

func TestMain(m *testing.M) {
	// The SQS variants talk to a local server only; any credentials do.
	os.Setenv("AWS_ACCESS_KEY_ID", "test")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	code := m.Run()
	if faux != nil {
		_ = faux.Stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	fauxOnce sync.Once
	faux     *fauxqs.Server
	fauxErr  error
	prefixes atomic.Int64
)

// backends are the queue backends the policy tests run on.
var backends = []string{"embedded", "sqs"}

// onEachBackend runs test as a parallel subtest per backend, each with the
// topology yaml set up on it.
func onEachBackend(t *testing.T, yaml string, test func(t *testing.T, tb *testBundle)) {
	t.Helper()
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, setupOn(t, kind, yaml))
		})
	}
}

// setupOn is setup on the named backend. On SQS each call gets queues of
// its own under a fresh name prefix, on one local server per test binary.
func setupOn(t *testing.T, kind, yaml string) *testBundle {
	t.Helper()
	if kind == "embedded" {
		return setup(t, yaml)
	}
	fauxOnce.Do(func() { faux, fauxErr = fauxqs.Start(context.Background(), nil) })
	if fauxErr != nil {
		t.Fatalf("start the local SQS-compatible server: %v", fauxErr)
	}
	topo, err := topology.Parse(fmt.Appendf(nil, "prefix: t%d-%d\n%s", os.Getpid(), prefixes.Add(1), yaml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqsqueue.New(t.Context(), sqsqueue.Config{Endpoint: faux.Endpoint, Region: fauxqs.Region, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.EnsureQueues(t.Context(), topo.Specs()); err != nil {
		t.Fatal(err)
	}
	return &testBundle{backend: b, topo: topo}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testBundle is a real embedded backend holding a topology's queues.
type testBundle struct {
	backend queue.Backend
	topo    topology.Topology
}

func setup(t testing.TB, yaml string) *testBundle {
	t.Helper()
	topo, err := topology.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "queues.db"), embeddedqueue.Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.EnsureQueues(t.Context(), topo.Specs()); err != nil {
		t.Fatal(err)
	}
	return &testBundle{backend: b, topo: topo}
}

// enqueue stores jobs on queue q, in order, as the gateway would.
func (tb *testBundle) enqueue(t testing.TB, q string, envs ...*envelope.Envelope) {
	t.Helper()
	for start := 0; start < len(envs); start += queue.MaxBatch {
		chunk := envs[start:min(start+queue.MaxBatch, len(envs))]
		entries := make([]queue.SendEntry, len(chunk))
		for i, e := range chunk {
			body, err := envelope.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: body}
		}
		res, err := tb.backend.Send(t.Context(), &queue.SendParams{Queue: q, Entries: entries})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

func testEnvelope(tenant, id string, enqueuedAt time.Time) *envelope.Envelope {
	return &envelope.Envelope{JobId: id, Tenant: tenant, Lane: "std", Payload: []byte(id), EnqueuedAt: timestamppb.New(enqueuedAt)}
}

// recorder is a Handler that records the order of deliveries.
type recorder struct {
	mu    sync.Mutex
	order []*Job
	fail  func(*Job) error
	hold  chan struct{} // when set, each delivery waits for it to close
	got   chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 1)} }

func (r *recorder) Handle(ctx context.Context, j *Job) error {
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	var err error
	if r.fail != nil {
		err = r.fail(j)
	}
	if err == nil {
		r.order = append(r.order, j)
	}
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
	return err
}

func (r *recorder) delivered() []*Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Job(nil), r.order...)
}

// waitCount waits until n jobs were delivered.
func (r *recorder) waitCount(t *testing.T, n int) []*Job {
	t.Helper()
	deadline := time.After(120 * time.Second)
	for {
		if got := r.delivered(); len(got) >= n {
			return got
		}
		select {
		case <-r.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of %d jobs delivered within 120s", len(r.delivered()), n)
		}
	}
}

func startDrainer(t testing.TB, cfg Config) *Drainer {
	t.Helper()
	cfg.Logger = quietLog
	if cfg.PollWait == 0 {
		cfg.PollWait = 200 * time.Millisecond
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return d
}
