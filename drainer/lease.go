package drainer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// ErrLeaseLost means the drainer no longer holds a message: its visibility
// timeout passed and another consumer may have received it. The receipt
// handle is refused from then on (fencing), so the old holder can neither
// ack nor extend it.
var ErrLeaseLost = errors.New("lease lost")

// lease is a held message: the receipt that lets its holder extend,
// delete or release it.
type lease struct {
	backend queue.Backend
	queue   string
	receipt string
}

func (l *lease) result(errs []error, err error) error {
	if err == nil && len(errs) > 0 {
		err = errs[0]
	}
	if errors.Is(err, queue.ErrReceiptInvalid) {
		return fmt.Errorf("%s: %w: %w", l.queue, ErrLeaseLost, err)
	}
	return err
}

// extend sets the remaining visibility to d.
func (l *lease) extend(ctx context.Context, d time.Duration) error {
	return l.result(l.backend.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{
		Queue: l.queue, Changes: []queue.VisibilityChange{{ReceiptHandle: l.receipt, Timeout: d}},
	}))
}

// ack deletes the message.
func (l *lease) ack(ctx context.Context) error {
	return l.result(l.backend.Delete(ctx, &queue.DeleteParams{Queue: l.queue, ReceiptHandles: []string{l.receipt}}))
}

// heartbeat extends the lease to timeout every timeout/3 until stop is
// called. If the lease is lost it calls lost once and ends. It runs on a
// timer, with no goroutine of its own while it waits: most deliveries end
// before the first beat.
func (l *lease) heartbeat(timeout time.Duration, lost func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		stopped bool
		running chan struct{} // closed when the beat under way ends
		t       *time.Timer
	)
	mu.Lock() // t is set before the first beat reads it
	defer mu.Unlock()
	t = time.AfterFunc(timeout/3, func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		done := make(chan struct{})
		running = done
		mu.Unlock()
		defer close(done)
		opCtx, opCancel := context.WithTimeout(ctx, timeout/3)
		err := l.extend(opCtx, timeout)
		opCancel()
		if errors.Is(err, ErrLeaseLost) {
			lost(err)
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(timeout / 3)
		}
		mu.Unlock()
	})
	return func() {
		cancel()
		mu.Lock()
		stopped = true
		t.Stop()
		r := running
		mu.Unlock()
		if r != nil {
			<-r
		}
	}
}
