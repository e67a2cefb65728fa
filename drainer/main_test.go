package drainer

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/topology"
)

func TestMain(m *testing.M) { os.Exit(topotest.Main(m)) }

// onEachBackend runs test as a parallel subtest per backend, each with the
// topology yaml set up on it.
func onEachBackend(t *testing.T, yaml string, test func(t *testing.T, tb *testBundle)) {
	t.Helper()
	topotest.OnEachBackend(t, yaml, func(t *testing.T, b *topotest.Bundle) { test(t, bundle(b)) })
}

var quietLog = topotest.QuietLog

// testBundle is a real backend holding a topology's queues.
type testBundle struct {
	backend queue.Backend
	topo    topology.Topology
	*topotest.Bundle
}

func bundle(b *topotest.Bundle) *testBundle {
	return &testBundle{backend: b.Backend, topo: b.Topo, Bundle: b}
}

func setup(t testing.TB, yaml string) *testBundle {
	t.Helper()
	return bundle(topotest.Setup(t, yaml))
}

// enqueue stores jobs on queue q, in order, as the gateway would.
func (tb *testBundle) enqueue(t testing.TB, q string, envs ...*envelope.Envelope) {
	t.Helper()
	tb.Enqueue(t, q, envs...)
}

var testEnvelope = topotest.Envelope

// deadLetters returns the envelopes in the std lane's DLQ.
func deadLetters(t *testing.T, tb *testBundle) []*envelope.Envelope {
	t.Helper()
	return tb.DeadLetters(t, "std")
}

// recorder is a Handler that records the order of deliveries.
type recorder struct {
	mu    sync.Mutex
	order []*Job
	fail  func(*Job) error
	hold  chan struct{} // when set, each delivery waits for it to close
	work  time.Duration // when set, each delivery takes this long
	got   chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 1)} }

func (r *recorder) Handle(ctx context.Context, j *Job) error {
	if r.work > 0 {
		time.Sleep(r.work)
	}
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
