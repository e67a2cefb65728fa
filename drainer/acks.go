package drainer

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// acker deletes acked jobs of one queue in batches: concurrent acks are
// gathered, and the first caller to find no delete under way waits up to
// ackLinger for a whole batch, then deletes what has gathered, up to a
// batch per call, until none is left; the others return at once, and
// each result goes to acked, from whichever caller deleted it.
// While a whole batch is waiting, another caller
// deletes too, up to ackDeleters calls at once: one call at a time capped
// a queue's acks at a batch per round trip (on SQS, a few thousand jobs/s
// per shard, below what the server serves to consumers that overlap).
// On the embedded backend this is one store operation per batch instead
// of per job; on SQS the backend batches too.
// Each batch gets opTimeout of its own: under steady load one caller may
// delete batch after batch for longer than that, and the others' acks
// must not fail with its deadline (they did, and the jobs, already run,
// were delivered again).
//
// A caller whose ack another deletes does not wait for it: its runner
// takes the next job at once. Waiting, each ack cost a channel, and the
// runners parked on them made the dispatcher start more runners.
type acker struct {
	// acked is told each ack's result: nil, or why its delete failed (an
	// ErrLeaseLost error when the backend refused its receipt).
	acked func(j *job, err error)

	mu       sync.Mutex
	pending  []ackReq
	deleting int // callers deleting
	// filled, while the first deleter lingers, is closed by the ack that
	// makes the pending acks a whole batch.
	filled chan struct{}
}

// ackDeleters is the most delete calls one queue's acks have in flight.
const ackDeleters = 4

// ackLinger is how long a deleter that finds less than a batch pending,
// and no other delete under way, waits for more acks before it deletes.
// A pull worker's answers come in batches, but each of its jobs is acked
// by its own caller: the first deleted alone, and the batches that
// followed were split by the calls already under way (about 4 jobs per
// delete in the pull drain benchmark, against 10 for raw
// receive+delete). The job's slot is free already; only its delete waits.
const ackLinger = time.Millisecond

// ackReq is one ack waiting for its delete. Its lease is held by value:
// made for the ack alone, a *lease was an allocation per job.
type ackReq struct {
	j *job
	l lease
}

// ack deletes l's message, j's, and tells a.acked the result, then or
// later: a caller that finds a deleter free for its ack returns at once.
// ctx bounds the batches this caller deletes, its own and others'.
func (a *acker) ack(ctx context.Context, j *job, l lease) {
	a.mu.Lock()
	a.pending = append(a.pending, ackReq{j: j, l: l})
	if a.filled != nil && len(a.pending) >= queue.MaxBatch {
		// The lingering deleter takes this batch now.
		close(a.filled)
		a.filled = nil
		a.mu.Unlock()
		return
	}
	if a.deleting > 0 && (len(a.pending) < queue.MaxBatch || a.deleting >= ackDeleters) {
		// A deleter will take it: the one under way loops until none is
		// left.
		a.mu.Unlock()
		return
	}
	a.deleting++
	var filled chan struct{}
	if a.deleting == 1 && len(a.pending) < queue.MaxBatch {
		filled = make(chan struct{})
		a.filled = filled
	}
	a.mu.Unlock()
	if filled != nil {
		a.linger(ctx, filled)
	}
	for {
		a.mu.Lock()
		n := min(len(a.pending), queue.MaxBatch)
		if n == 0 {
			a.deleting--
			a.mu.Unlock()
			return
		}
		batch := a.pending[:n:n]
		a.pending = a.pending[n:]
		a.mu.Unlock()
		a.flush(ctx, batch)
	}
}

// linger waits up to ackLinger for the pending acks to fill a batch.
func (a *acker) linger(ctx context.Context, filled chan struct{}) {
	t := time.NewTimer(ackLinger)
	defer t.Stop()
	select {
	case <-filled:
	case <-t.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	if a.filled == filled {
		a.filled = nil
	}
	a.mu.Unlock()
}

// flush deletes a batch of one queue's messages, within opTimeout and ctx,
// and reports each ack's result.
func (a *acker) flush(ctx context.Context, batch []ackReq) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
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
		a.acked(r.j, r.l.result(e, err))
	}
}
