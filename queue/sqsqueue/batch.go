package sqsqueue

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/idlewait"
	"github.com/sluice-dev/sluice/queue"
)

// batcher gathers the entries that concurrent calls make to one queue into
// batch API calls of up to queue.MaxBatch entries (and, for sends,
// MaxBatchPayloadBytes of bodies). A batch goes out when full, or its
// linger (Config.Linger for sends, Config.DeleteLinger for deletes) after
// its first entry, whichever comes first; with a negative linger, at the
// end of each add.
type batcher[T any] struct {
	b      *Backend
	name   string
	url    string
	size   func(T) int // bytes an entry adds to the batch; nil for no byte limit
	linger time.Duration
	flush  func(bt *batcher[T], entries []T)

	mu    sync.Mutex
	cur   *pendingBatch[T]
	bytes int // size of cur's entries

	// idle hands a full batch to a flusher goroutine waiting for one
	// (flusher); unbuffered, so a batch goes to a goroutine that is
	// really there, or to a new one.
	idle chan []T
}

type pendingBatch[T any] struct {
	entries []T
	timer   *time.Timer
}

// flusher is a batcher of any entry type, as Close sees it.
type flusher interface{ flushNow() }

type batcherKey struct {
	op        op
	name, url string
}

// batcherFor returns the batcher of op on a queue URL, creating it with
// newBatcher. Batchers are kept for the backend's life (one per URL a name
// has resolved to), so Close finds every pending batch.
func batcherFor[T any](b *Backend, o op, name, url string, newBatcher func() *batcher[T]) *batcher[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := batcherKey{o, name, url}
	if bt, ok := b.batchers[key].(*batcher[T]); ok {
		return bt
	}
	bt := newBatcher()
	bt.b, bt.name, bt.url, bt.idle = b, name, url, make(chan []T)
	b.batchers[key] = bt
	return bt
}

// add appends entries to the current batch, sending batches as they fill.
func (bt *batcher[T]) add(entries []T) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	for _, e := range entries {
		n := 0
		if bt.size != nil {
			n = bt.size(e)
			if bt.cur != nil && bt.bytes+n > MaxBatchPayloadBytes {
				bt.flushLocked()
			}
		}
		if bt.cur == nil {
			p := &pendingBatch[T]{entries: make([]T, 0, queue.MaxBatch)}
			if bt.linger > 0 {
				p.timer = time.AfterFunc(bt.linger, func() { bt.flushIf(p) })
			}
			bt.cur = p
		}
		bt.cur.entries = append(bt.cur.entries, e)
		bt.bytes += n
		if len(bt.cur.entries) == queue.MaxBatch {
			bt.flushLocked()
		}
	}
	if bt.linger < 0 && bt.cur != nil {
		bt.flushLocked()
	}
}

// flushIf sends p if it is still the current batch (its linger passed).
func (bt *batcher[T]) flushIf(p *pendingBatch[T]) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if bt.cur == p {
		bt.flushLocked()
	}
}

func (bt *batcher[T]) flushNow() {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if bt.cur != nil {
		bt.flushLocked()
	}
}

// flusherIdle is how long a flusher goroutine waits for its batcher's
// next batch before it ends.
const flusherIdle = time.Second

// flushLocked sends the current batch, on a flusher goroutine that
// finished its last batch and waits for another if there is one, else on
// a new one.
//
// A goroutine started per batch grew its stack, batch after batch, to the
// depth of the SDK's middleware stack: in a profile of a drainer pulling
// from the local SQS server, that stack growth (runtime.newstack) was
// about a third of the CPU of its DeleteMessageBatch calls and 5 % of
// the process's.
func (bt *batcher[T]) flushLocked() {
	p := bt.cur
	bt.cur, bt.bytes = nil, 0
	if p.timer != nil {
		p.timer.Stop()
	}
	bt.b.inflight.Add(1)
	select {
	case bt.idle <- p.entries:
	default:
		go bt.flusher(p.entries)
	}
}

// flusher sends entries, then the batches handed to it while it waits
// (flushLocked), until none comes for flusherIdle or the backend closes.
func (bt *batcher[T]) flusher(entries []T) {
	wait := idlewait.Waiter[[]T]{Idle: flusherIdle}
	defer wait.Stop()
	for {
		bt.flush(bt, entries)
		bt.b.inflight.Done()
		var ok bool
		if entries, ok = wait.Next(bt.idle, bt.b.closeCtx.Done()); !ok {
			return
		}
	}
}

// enqueue hands entries to a batcher unless the backend is closed, under
// the lifecycle lock, so that Close finds every entry in a batch it
// flushes.
func enqueue[T any](b *Backend, bt *batcher[T], entries []T) bool {
	b.lifecycle.RLock()
	defer b.lifecycle.RUnlock()
	if b.closed.Load() {
		return false
	}
	bt.add(entries)
	return true
}

// waiter is a call waiting for the outcomes of its entries, which other
// goroutines report as their batches complete.
type waiter struct {
	ctx       context.Context
	remaining atomic.Int32
	done      chan struct{}
}

func newWaiter(ctx context.Context, n int) *waiter {
	w := &waiter{ctx: ctx, done: make(chan struct{})}
	w.remaining.Store(int32(n))
	return w
}

// settled records one entry's outcome.
func (w *waiter) settled() {
	if w.remaining.Add(-1) == 0 {
		close(w.done)
	}
}

// wait waits for every entry's outcome, or for ctx to end; it reports
// whether all outcomes are known.
func (w *waiter) wait() bool {
	select {
	case <-w.done:
		return true
	case <-w.ctx.Done():
		select {
		case <-w.done: // finished as ctx ended: the results are known
			return true
		default:
			return false
		}
	}
}
