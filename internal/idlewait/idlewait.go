// Package idlewait lets a goroutine that has finished one item of work
// wait a while for the next, handed to it on a channel, instead of
// ending: work started on a goroutine per item paid for a new goroutine,
// its stack grown anew to the work's depth, every time. The drainer's
// delivery runners, the worker's handlers and the SQS backend's batch
// flushers share it.
package idlewait

import "time"

// Waiter waits for a goroutine's next item, up to Idle each time. Its
// zero value with Idle set is ready; Stop releases its timer.
type Waiter[T any] struct {
	Idle  time.Duration
	timer *time.Timer
}

// Next returns the item handed on next within w.Idle, or false when none
// came or stop was closed first: the goroutine should end.
func (w *Waiter[T]) Next(next <-chan T, stop <-chan struct{}) (T, bool) {
	if w.timer == nil {
		w.timer = time.NewTimer(w.Idle)
	} else {
		w.timer.Reset(w.Idle)
	}
	var zero T
	select {
	case item := <-next:
		return item, true
	case <-w.timer.C:
		return zero, false
	case <-stop:
		return zero, false
	}
}

// Stop releases the timer, if any.
func (w *Waiter[T]) Stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}
