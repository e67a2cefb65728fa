package drainer

import (
	"context"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// grantDuringRenewal is a backend whose first renewal of a held job (any
// ChangeVisibility not about the job delivered first) returns what
// duringIt returns, without reaching the backend. It counts each job's
// receives.
type grantDuringRenewal struct {
	queue.Backend
	mu       sync.Mutex
	ids      map[string]string // receipt handle → job id
	received map[string]int    // job id → receives
	first    string            // id of the job delivered first
	hooked   bool
	duringIt func(ctx context.Context) error
}

func (b *grantDuringRenewal) Receive(ctx context.Context, p *queue.ReceiveParams) ([]queue.Message, error) {
	msgs, err := b.Backend.Receive(ctx, p)
	b.mu.Lock()
	for _, m := range msgs {
		env, _ := envelope.Decode(m.Body)
		b.ids[m.ReceiptHandle] = env.GetJobId()
		b.received[env.GetJobId()]++
	}
	b.mu.Unlock()
	return msgs, err
}

func (b *grantDuringRenewal) ChangeVisibility(ctx context.Context, p *queue.ChangeVisibilityParams) ([]error, error) {
	b.mu.Lock()
	held := !b.hooked && b.first != "" && len(p.Changes) == 1 && b.ids[p.Changes[0].ReceiptHandle] != b.first
	if held {
		b.hooked = true
	}
	b.mu.Unlock()
	if held {
		return nil, b.duringIt(ctx)
	}
	return b.Backend.ChangeVisibility(ctx, p)
}

// twoJobs holds the first job it gets until releaseFirst closes and the
// second until its context ends or releaseSecond closes.
type twoJobs struct {
	b                           *grantDuringRenewal
	releaseFirst, releaseSecond chan struct{}
	secondStarted               chan struct{}
	starts                      int
	secondCancelled             bool
	mu                          sync.Mutex
}

func (h *twoJobs) Handle(ctx context.Context, j *Job) error {
	h.mu.Lock()
	h.starts++
	n := h.starts
	h.mu.Unlock()
	if n == 1 {
		h.b.mu.Lock()
		h.b.first = j.ID
		h.b.mu.Unlock()
		<-h.releaseFirst
		return nil
	}
	if n > 2 {
		return nil // delivered again: the failure this test looks for
	}
	close(h.secondStarted)
	select {
	case <-h.releaseSecond:
		return nil
	case <-ctx.Done():
		h.mu.Lock()
		h.secondCancelled = true
		h.mu.Unlock()
		return ctx.Err()
	}
}

// TestHeldJobGrantedDuringFailedRenewalKeepsItsLease: a held job's
// renewal call fails while the job is granted a slot. The held-job renewer
// had already marked it renewed (leasedAt = now) before the call, and on
// the failure put back the old time only for jobs still held; the job in
// delivery kept the false time, so the lease keeper waited a third of the
// visibility timeout from a renewal that never happened, by when the lease
// had run out: the delivery was cancelled as lease-lost and the job was
// delivered again.
func TestHeldJobGrantedDuringFailedRenewalKeepsItsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tb := setup(t, "lanes:\n  - {name: std, shards: 1, visibility_timeout: 3s}\n")
		q := tb.topo.ShardQueue("std", 0)
		tb.enqueue(t, q, testEnvelope("t", "a", time.Now()), testEnvelope("t", "b", time.Now()))
		b := &grantDuringRenewal{Backend: tb.backend, ids: map[string]string{}, received: map[string]int{}}
		h := &twoJobs{b: b, releaseFirst: make(chan struct{}), releaseSecond: make(chan struct{}), secondStarted: make(chan struct{})}
		b.duringIt = func(context.Context) error {
			close(h.releaseFirst)
			<-h.secondStarted
			return queue.ErrUnavailable
		}
		d := startDrainer(t, Config{Backend: b, Topology: tb.topo, Handler: h, Concurrency: 1})
		time.Sleep(3 * vis)
		synctest.Wait()
		c := d.Counts()
		h.mu.Lock()
		cancelled, starts := h.secondCancelled, h.starts
		h.mu.Unlock()
		close(h.releaseSecond)
		topotest.WaitFor(t, func() bool { return d.Counts().Delivered+d.Counts().LeaseLost >= 2 })
		if !b.hooked {
			t.Fatal("no renewal of the held job was seen")
		}
		if c.LeaseLost != 0 || cancelled || starts != 2 {
			t.Fatalf("counts %+v, second delivery cancelled %v, %d starts: the job granted during its failed renewal lost its lease", c, cancelled, starts)
		}
	})
}

// TestHungHeldRenewalIsAbandoned: a held job's renewal call that hangs
// (a backend that neither answers nor fails) is given up in time and
// tried again while the lease still runs. The held-job renewer called the
// backend with no deadline of its own: one hung call stopped every held
// job's renewal, their leases ran out, and the pollers received them again
// (a second copy held, the job delivered twice).
func TestHungHeldRenewalIsAbandoned(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tb := setup(t, "lanes:\n  - {name: std, shards: 1, visibility_timeout: 3s}\n")
		q := tb.topo.ShardQueue("std", 0)
		tb.enqueue(t, q, testEnvelope("t", "a", time.Now()), testEnvelope("t", "b", time.Now()))
		b := &grantDuringRenewal{Backend: tb.backend, ids: map[string]string{}, received: map[string]int{}}
		b.duringIt = func(ctx context.Context) error {
			<-ctx.Done() // hangs until its caller gives up
			return ctx.Err()
		}
		h := &twoJobs{b: b, releaseFirst: make(chan struct{}), releaseSecond: make(chan struct{}), secondStarted: make(chan struct{})}
		d := startDrainer(t, Config{Backend: b, Topology: tb.topo, Handler: h, Concurrency: 1})
		time.Sleep(3 * vis)
		synctest.Wait()
		b.mu.Lock()
		hooked, received := b.hooked, maps.Clone(b.received)
		b.mu.Unlock()
		close(h.releaseFirst)
		close(h.releaseSecond)
		topotest.WaitFor(t, func() bool { return d.Counts().Delivered >= 2 })
		if !hooked {
			t.Fatal("no renewal of the held job was seen")
		}
		for id, n := range received {
			if n != 1 {
				t.Fatalf("job %s received %d times in %s while the drainer held it (receives %v): its lease ran out behind a hung renewal", id, n, 3*vis, received)
			}
		}
	})
}
