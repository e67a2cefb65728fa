// Package faultqueue wraps a real queue.Backend so that tests can make its
// calls fail, in the spirit of asynq's internal/testbroker: Sleep makes
// calls fail with queue.ErrUnavailable until Wakeup, and Inject chooses
// per call (by operation and queue) which ones fail and how. Calls that are
// not failed go to the wrapped backend unchanged, so the wrapper passes the
// queue conformance suite and the code under test runs against real
// storage; only the failure is made up.
//
// A failed call never reaches the wrapped backend: it has done nothing, as
// queue.Backend promises for a call that returns an error.
package faultqueue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluice-dev/sluice/queue"
)

// Op names a queue.Backend method.
type Op string

// The operations a fault can fail. Close is never failed.
const (
	OpEnsureQueues     Op = "EnsureQueues"
	OpSend             Op = "Send"
	OpReceive          Op = "Receive"
	OpDelete           Op = "Delete"
	OpChangeVisibility Op = "ChangeVisibility"
	OpStats            Op = "Stats"
)

// Call describes one backend call, for a Fault to judge.
type Call struct {
	// Ctx is the call's context.
	Ctx context.Context
	Op  Op
	// Queue is the queue the call is about. EnsureQueues and Stats, which
	// name several, are judged once per queue and fail if any call fails.
	Queue string
}

// Fault decides whether a call fails: a non-nil error fails it with that
// error (wrapped with the operation and queue) before it reaches the
// wrapped backend. It may be called from many goroutines at once.
type Fault func(Call) error

// Unavailable is a Fault that fails the calls of the given operations (all
// of them when none is given) on the given queue (any queue when empty)
// with queue.ErrUnavailable.
func Unavailable(q string, ops ...Op) Fault {
	return func(c Call) error {
		if q != "" && c.Queue != q {
			return nil
		}
		if len(ops) == 0 {
			return queue.ErrUnavailable
		}
		for _, op := range ops {
			if op == c.Op {
				return queue.ErrUnavailable
			}
		}
		return nil
	}
}

// Backend is a queue.Backend that passes calls to a wrapped backend unless
// its fault fails them. The zero fault fails nothing. Safe for concurrent
// use.
type Backend struct {
	inner queue.Backend

	mu     sync.RWMutex
	fault  Fault
	failed map[Op]*atomic.Int64
}

var _ queue.Backend = (*Backend)(nil)

// New wraps inner, failing nothing until Sleep or Inject.
func New(inner queue.Backend) *Backend {
	b := &Backend{inner: inner, failed: map[Op]*atomic.Int64{}}
	for _, op := range []Op{OpEnsureQueues, OpSend, OpReceive, OpDelete, OpChangeVisibility, OpStats} {
		b.failed[op] = new(atomic.Int64)
	}
	return b
}

// Sleep makes every call (of the given operations only, when some are
// given) fail with queue.ErrUnavailable until Wakeup.
func (b *Backend) Sleep(ops ...Op) { b.Inject(Unavailable("", ops...)) }

// Wakeup ends Sleep or Inject: calls go through again.
func (b *Backend) Wakeup() { b.Inject(nil) }

// Inject replaces the fault; nil fails nothing.
func (b *Backend) Inject(f Fault) {
	b.mu.Lock()
	b.fault = f
	b.mu.Unlock()
}

// Failed returns how many calls of op the fault has failed so far.
func (b *Backend) Failed(op Op) int64 {
	if n, ok := b.failed[op]; ok {
		return n.Load()
	}
	return 0
}

// check returns the injected error for a call about queues, or nil to let
// it through.
func (b *Backend) check(ctx context.Context, op Op, queues ...string) error {
	b.mu.RLock()
	f := b.fault
	b.mu.RUnlock()
	if f == nil {
		return nil
	}
	if len(queues) == 0 {
		queues = []string{""}
	}
	for _, q := range queues {
		if err := f(Call{Ctx: ctx, Op: op, Queue: q}); err != nil {
			b.failed[op].Add(1)
			return fmt.Errorf("faultqueue: %s %s: %w", op, q, err)
		}
	}
	return nil
}

// EnsureQueues implements queue.Backend.
func (b *Backend) EnsureQueues(ctx context.Context, specs []queue.QueueSpec) error {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	if err := b.check(ctx, OpEnsureQueues, names...); err != nil {
		return err
	}
	return b.inner.EnsureQueues(ctx, specs)
}

// Send implements queue.Backend.
func (b *Backend) Send(ctx context.Context, params *queue.SendParams) ([]queue.SendResult, error) {
	if err := b.check(ctx, OpSend, params.Queue); err != nil {
		return nil, err
	}
	return b.inner.Send(ctx, params)
}

// Receive implements queue.Backend.
func (b *Backend) Receive(ctx context.Context, params *queue.ReceiveParams) ([]queue.Message, error) {
	if err := b.check(ctx, OpReceive, params.Queue); err != nil {
		return nil, err
	}
	return b.inner.Receive(ctx, params)
}

// Delete implements queue.Backend.
func (b *Backend) Delete(ctx context.Context, params *queue.DeleteParams) ([]error, error) {
	if err := b.check(ctx, OpDelete, params.Queue); err != nil {
		return nil, err
	}
	return b.inner.Delete(ctx, params)
}

// ChangeVisibility implements queue.Backend.
func (b *Backend) ChangeVisibility(ctx context.Context, params *queue.ChangeVisibilityParams) ([]error, error) {
	if err := b.check(ctx, OpChangeVisibility, params.Queue); err != nil {
		return nil, err
	}
	return b.inner.ChangeVisibility(ctx, params)
}

// Stats implements queue.Backend.
func (b *Backend) Stats(ctx context.Context, params *queue.StatsParams) ([]queue.Stats, error) {
	if err := b.check(ctx, OpStats, params.Queues...); err != nil {
		return nil, err
	}
	return b.inner.Stats(ctx, params)
}

// Close closes the wrapped backend. It is never failed.
func (b *Backend) Close() error { return b.inner.Close() }
