// Package startstop is the one lifecycle every long-running part of sluice
// has, after river's rivershared/startstop:
//
//   - Start(ctx) error launches the part's goroutines and returns. ctx
//     supplies values only: its end does not stop the part, Stop does.
//     A second Start, or a Start after Stop, fails.
//   - Stop(ctx) error stops them and waits no longer than ctx allows: if
//     ctx ends first, the work still running is cancelled and Stop returns
//     ctx's error. It is idempotent (a second call returns the first's
//     result) and safe before Start (it does nothing, and a later Start
//     fails).
//
// The gateway, the drainer, the depth cache, the admin API, the observer
// and the CloudWatch publisher all implement Service; Runner does the
// bookkeeping for those whose work is one goroutine, and startstoptest
// checks an implementation.
package startstop

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Service is a part with a lifecycle.
type Service interface {
	Start(ctx context.Context) error
	Stopper
}

// Stopper is the stopping half of a Service, for parts that a constructor
// starts (node.StartObserver) and for code that only stops them.
type Stopper interface {
	Stop(ctx context.Context) error
}

// Errors of Start.
var (
	ErrStarted = errors.New("already started")
	ErrStopped = errors.New("start after stop")
)

// Runner runs one goroutine for a Service. Its zero value is ready to use.
type Runner struct {
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
	stopErr error
}

// Start runs run in a goroutine with a context that Stop cancels; run must
// return once it is cancelled.
func (r *Runner) Start(ctx context.Context, run func(ctx context.Context)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopped:
		return ErrStopped
	case r.started:
		return ErrStarted
	}
	r.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		run(runCtx)
	}()
	return nil
}

// Stop cancels run's context and waits for run to return or ctx to end,
// whichever is first; in the second case run is still stopping when Stop
// returns ctx's error. Idempotent; safe before Start.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return r.stopErr
	}
	r.stopped = true
	if !r.started {
		return nil
	}
	r.cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		r.stopErr = fmt.Errorf("stop: %w", ctx.Err())
	}
	return r.stopErr
}
