package drainer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/worker"
)

// TestHandedBackJobKeepsItsReceives hands one job back (worker.ErrReleased:
// its worker went away before answering) as many times as its lane's
// max_receive_count, then acks it. A hand-back is no attempt, so the job
// must be delivered, not dead-lettered by the backend's redrive: on its
// last receive it is requeued as a fresh copy instead of made visible.
func TestHandedBackJobKeepsItsReceives(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane) // max_receive_count: 3
	tb.enqueue(t, tb.topo.ShardQueue("std", 0), testEnvelope("t", "unlucky", time.Now()))
	var calls atomic.Int32
	var attempts []int
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		attempts = append(attempts, j.Attempt) // Concurrency 1: one at a time
		if calls.Add(1) <= 3 {
			return worker.ErrReleased
		}
		return nil
	})
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: h, Concurrency: 1})
	topotest.WaitFor(t, func() bool { return d.Counts().Delivered == 1 || len(deadLetters(t, tb)) > 0 })
	if dl := deadLetters(t, tb); len(dl) != 0 {
		t.Fatalf("dead-lettered (attempts %d, reason %q) after %d hand-backs and no failure; counts %+v",
			dl[0].GetAttempts(), dl[0].GetDeadLetterReason(), calls.Load(), d.Counts())
	}
	c := d.Counts()
	if c.Released != 3 || c.Requeued != 1 {
		t.Errorf("counts %+v, want 3 released, the last of them requeued", c)
	}
	for i, a := range attempts {
		if a != 1 {
			t.Errorf("delivery %d was attempt %d, want 1 (a hand-back is no attempt)", i, a)
		}
	}
}
