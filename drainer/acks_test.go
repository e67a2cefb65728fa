package drainer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// slowDeleter is a backend whose Delete takes took (a network round trip
// or an fsync) and honours its context, as SQS's and the embedded one do.
type slowDeleter struct {
	queue.Backend
	took time.Duration
}

func (b *slowDeleter) Delete(ctx context.Context, p *queue.DeleteParams) ([]error, error) {
	select {
	case <-time.After(b.took):
		return make([]error, len(p.ReceiptHandles)), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// answers collects an acker's results: acker(n) expects n acks, and
// wait returns once all n are answered.
type answers struct {
	wg     sync.WaitGroup
	failed atomic.Int64
	first  atomic.Value // the first failure's text
}

func (r *answers) acker(n int) *acker {
	r.wg.Add(n)
	return &acker{acked: func(_ *job, err error) {
		if err != nil && r.failed.Add(1) == 1 {
			r.first.Store(err.Error())
		}
		r.wg.Done()
	}}
}

func (r *answers) wait(t *testing.T) {
	t.Helper()
	r.wg.Wait()
	if n := r.failed.Load(); n > 0 {
		t.Fatalf("%d acks failed; first: %v", n, r.first.Load())
	}
}

// ackFrom acks a lease of handle i on b from a goroutine of its own, as
// a runner does.
func ackFrom(a *acker, b queue.Backend, i int) {
	go a.ack(context.Background(), &job{}, lease{backend: b, queue: "q", receipt: fmt.Sprint(i)})
}

// TestAckerUnderSteadyLoad: one ack arrives every 5 ms for 40 s and each
// delete takes 20 ms, so the caller that first found no delete under way
// keeps deleting everyone's acks for the whole run. Each batch has a
// deadline of its own: with the flusher's, acks failed once it passed
// opTimeout, and their jobs, already run, were delivered again (found in
// review).
func TestAckerUnderSteadyLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		every time.Duration // one ack arrives this often
		run   time.Duration // for this long
	}{
		{"light load: flusher goes idle between acks", 50 * time.Millisecond, 40 * time.Second},
		{"steady load: flusher never goes idle", 5 * time.Millisecond, 40 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := &slowDeleter{took: 20 * time.Millisecond}
				var r answers
				a := r.acker(int((tt.run + tt.every - 1) / tt.every))
				for i := 0; time.Duration(i)*tt.every < tt.run; i++ {
					ackFrom(a, b, i)
					time.Sleep(tt.every)
				}
				r.wait(t)
			})
		})
	}
}

// countingDeleter is a slowDeleter that records the most Delete calls in
// flight at once and the handles it deleted.
type countingDeleter struct {
	slowDeleter
	inFlight, most atomic.Int64
	calls          atomic.Int64
	mu             sync.Mutex
	deleted        map[string]int
}

func (b *countingDeleter) Delete(ctx context.Context, p *queue.DeleteParams) ([]error, error) {
	b.calls.Add(1)
	b.mu.Lock()
	n := b.inFlight.Add(1)
	b.most.Store(max(b.most.Load(), n))
	b.mu.Unlock()
	defer b.inFlight.Add(-1)
	res, err := b.slowDeleter.Delete(ctx, p)
	b.mu.Lock()
	for _, h := range p.ReceiptHandles {
		b.deleted[h]++
	}
	b.mu.Unlock()
	return res, err
}

// TestAckerOverlapsDeletesUnderLoad: with many acks waiting, a queue has
// several delete calls in flight (at most ackDeleters), each a full
// batch, and every ack is deleted exactly once; with acks trickling in,
// one call at a time batches them.
func TestAckerOverlapsDeletesUnderLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		acks     int
		every    time.Duration // one ack arrives this often
		wantMost int64
	}{
		{"burst: deletes overlap, up to the bound", 400, 0, ackDeleters},
		{"trickle: one delete at a time", 20, 50 * time.Millisecond, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := &countingDeleter{slowDeleter: slowDeleter{took: 20 * time.Millisecond}, deleted: map[string]int{}}
				var r answers
				a := r.acker(tt.acks)
				for i := range tt.acks {
					ackFrom(a, b, i)
					if tt.every > 0 {
						time.Sleep(tt.every)
					} else {
						synctest.Wait()
					}
				}
				r.wait(t)
				if got := b.most.Load(); got != tt.wantMost {
					t.Errorf("most deletes in flight = %d, want %d", got, tt.wantMost)
				}
				if len(b.deleted) != tt.acks {
					t.Errorf("%d distinct handles deleted, want %d", len(b.deleted), tt.acks)
				}
				for h, n := range b.deleted {
					if n != 1 {
						t.Errorf("handle %s deleted %d times", h, n)
					}
				}
			})
		})
	}
}

// TestAckerGathersABatch: acks that arrive together (a pull worker's
// batch of answers, each acked by its own caller) go in one delete; the
// first used to be deleted alone. A lone ack waits ackLinger at most.
func TestAckerGathersABatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		acks      int
		wantCalls int64
		wantTook  time.Duration // from the first ack to the last answer
	}{
		{"a batch at once", queue.MaxBatch, 1, 20 * time.Millisecond},
		{"a lone ack", 1, 1, ackLinger + 20*time.Millisecond},
		{"less than a batch", 7, 1, ackLinger + 20*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				b := &countingDeleter{slowDeleter: slowDeleter{took: 20 * time.Millisecond}, deleted: map[string]int{}}
				var r answers
				a := r.acker(tt.acks)
				start := time.Now()
				for i := range tt.acks {
					ackFrom(a, b, i)
				}
				r.wait(t)
				if got := b.calls.Load(); got != tt.wantCalls {
					t.Errorf("%d delete calls, want %d", got, tt.wantCalls)
				}
				if took := time.Since(start); took != tt.wantTook {
					t.Errorf("acks answered after %v, want %v", took, tt.wantTook)
				}
				if len(b.deleted) != tt.acks {
					t.Errorf("%d distinct handles deleted, want %d", len(b.deleted), tt.acks)
				}
			})
		})
	}
}

// TestAckerDoesNotHoldTheRunner: an ack that another caller deletes
// returns at once, so its runner takes its next job while the delete is
// under way; only the deleting caller waits, and every ack is answered.
func TestAckerDoesNotHoldTheRunner(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := &countingDeleter{slowDeleter: slowDeleter{took: 20 * time.Millisecond}, deleted: map[string]int{}}
		var r answers
		a := r.acker(queue.MaxBatch)
		ackFrom(a, b, 0) // finds no delete under way: it deletes
		synctest.Wait()
		start := time.Now()
		for i := 1; i < queue.MaxBatch; i++ {
			a.ack(context.Background(), &job{}, lease{backend: b, queue: "q", receipt: fmt.Sprint(i)})
			if took := time.Since(start); took != 0 {
				t.Fatalf("ack %d returned after %v, want at once", i, took)
			}
		}
		r.wait(t)
		if took := time.Since(start); took != 20*time.Millisecond {
			t.Errorf("acks answered after %v, want one delete's 20ms", took)
		}
		if got := b.calls.Load(); got != 1 {
			t.Errorf("%d delete calls, want 1", got)
		}
	})
}
