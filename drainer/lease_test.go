package drainer

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/internal/faultqueue"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// blockingHandler counts deliveries, signals the first one's start, and
// holds each until release is closed.
type blockingHandler struct {
	starts  atomic.Int32
	started chan struct{}
	release chan struct{}
}

func (h *blockingHandler) Handle(ctx context.Context, _ *Job) error {
	if h.starts.Add(1) == 1 {
		close(h.started)
	}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// vis is the visibility timeout of longDelivery's lane.
const vis = 3 * time.Second

// longDelivery runs, in a synctest bubble, a drainer on a lane with a
// visibility timeout of vis holding one job, over the real embedded
// backend wrapped by wrap (if not nil), and returns once the job's
// delivery has started: its handler holds it until h.release is closed.
func longDelivery(t *testing.T, wrap func(queue.Backend) queue.Backend) (*testBundle, string, *blockingHandler, *Drainer) {
	t.Helper()
	tb := setup(t, "lanes:\n  - {name: std, shards: 1, visibility_timeout: 3s}\n")
	q := tb.topo.ShardQueue("std", 0)
	tb.enqueue(t, q, testEnvelope("t", "long", time.Now()))
	b := queue.Backend(tb.backend)
	if wrap != nil {
		b = wrap(b)
	}
	h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	d := startDrainer(t, Config{Backend: b, Topology: tb.topo, Handler: h, Concurrency: 2})
	<-h.started
	return tb, q, h, d
}

// TestLeaseKeeperHoldsLongDeliveries runs a drainer in a synctest bubble on
// a real embedded backend: while a delivery runs three times its lane's
// visibility timeout, the lease keeper keeps the job hidden from other
// consumers, and the job is acked once with no lease lost. Time is the
// point, so it is fake: the test takes no wall-clock time and cannot flake
// under load.
func TestLeaseKeeperHoldsLongDeliveries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tb, q, h, d := longDelivery(t, nil)
		time.Sleep(3 * vis)
		synctest.Wait()
		msgs, err := tb.backend.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 1, VisibilityTimeout: vis})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 0 || h.starts.Load() != 1 {
			t.Fatalf("after %s in delivery: another consumer received %d, the drainer started it %d times; want 0 and 1",
				3*vis, len(msgs), h.starts.Load())
		}
		close(h.release)
		topotest.WaitFor(t, func() bool { return d.Counts().Delivered == 1 })
		if c := d.Counts(); c.LeaseLost != 0 {
			t.Fatalf("counts %+v: a lease was lost", c)
		}
		if s := stats(t, tb, q); s.Visible+s.InFlight != 0 {
			t.Fatalf("queue after the ack: %+v, want empty", s)
		}
	})
}

// TestFailedRenewalIsRetriedAtTheNextTick: a renewal call that fails
// (ErrUnavailable, the backend's "retry later") is tried again at the
// lease keeper's next tick, while the lease still runs. The keeper used to
// count the lease as renewed anyway and wait another third of the
// visibility timeout, by when the lease had run out: the delivery was
// cancelled and the job delivered again.
func TestFailedRenewalIsRetriedAtTheNextTick(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		failures int64 // ChangeVisibility calls failed, from the first
	}{
		{"no failure", 0},
		{"one transient failure", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var n atomic.Int64
				_, _, h, d := longDelivery(t, func(b queue.Backend) queue.Backend {
					fq := faultqueue.New(b)
					fq.Inject(func(c faultqueue.Call) error {
						if c.Op == faultqueue.OpChangeVisibility && n.Add(1) <= tt.failures {
							return queue.ErrUnavailable
						}
						return nil
					})
					return fq
				})
				time.Sleep(2 * vis)
				synctest.Wait()
				c := d.Counts()
				close(h.release)
				synctest.Wait()
				if c.LeaseLost != 0 {
					t.Fatalf("%d failed renewal call(s): counts %+v after %s: the delivery lost its lease (handler cancelled)",
						tt.failures, c, 2*vis)
				}
			})
		})
	}
}
