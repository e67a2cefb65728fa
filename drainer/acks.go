package drainer

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// acker deletes acked jobs of one queue in batches: concurrent acks are
// gathered, and the first caller to find no delete under way deletes what
// has gathered, up to a batch per call, until none is left; the others
// wait for their answers. On the embedded backend this is one store
// operation per batch instead of per job; on SQS the backend batches too.
//
// With a linger, that first caller first waits up to it for a full batch
// to gather. Acks run after their delivery slot is freed, so the wait
// costs no worker time and adds nothing to any job's dwell; on SQS, where
// each DeleteMessageBatch is billed, it makes fuller batches.
type acker struct {
	linger time.Duration

	mu      sync.Mutex
	pending []ackReq
	busy    bool          // a caller is deleting
	full    chan struct{} // signalled when a lingering caller has a batch
}

func newAcker(linger time.Duration) *acker {
	return &acker{linger: linger, full: make(chan struct{}, 1)}
}

type ackReq struct {
	l    *lease
	done chan error
}

// ack deletes l's message and returns the result for it alone (an
// ErrLeaseLost error when the backend refused its receipt).
func (a *acker) ack(ctx context.Context, l *lease) error {
	req := ackReq{l: l, done: make(chan error, 1)}
	a.mu.Lock()
	a.pending = append(a.pending, req)
	if a.busy {
		if len(a.pending) == queue.MaxBatch {
			select {
			case a.full <- struct{}{}:
			default:
			}
		}
		a.mu.Unlock()
		return <-req.done
	}
	a.busy = true
	a.mu.Unlock()
	a.gather(ctx)
	for {
		a.mu.Lock()
		n := min(len(a.pending), queue.MaxBatch)
		if n == 0 {
			a.busy = false
			a.mu.Unlock()
			break
		}
		batch := a.pending[:n:n]
		a.pending = a.pending[n:]
		a.mu.Unlock()
		flush(ctx, batch)
	}
	return <-req.done
}

// gather waits up to the linger for a full batch of acks.
func (a *acker) gather(ctx context.Context) {
	if a.linger <= 0 {
		return
	}
	select {
	case <-a.full: // left over from a batch already sent
	default:
	}
	a.mu.Lock()
	n := len(a.pending)
	a.mu.Unlock()
	if n >= queue.MaxBatch {
		return
	}
	t := time.NewTimer(a.linger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-a.full:
	case <-ctx.Done():
	}
}

// flush deletes a batch of one queue's messages and answers each request.
func flush(ctx context.Context, batch []ackReq) {
	first := batch[0].l
	handles := make([]string, len(batch))
	for i, r := range batch {
		handles[i] = r.l.receipt
	}
	errs, err := first.backend.Delete(ctx, &queue.DeleteParams{Queue: first.queue, ReceiptHandles: handles})
	for i, r := range batch {
		var e []error
		if i < len(errs) {
			e = errs[i : i+1]
		}
		r.done <- r.l.result(e, err)
	}
}
