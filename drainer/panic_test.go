package drainer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/sideliner"
)

// TestHandlerPanicFailsTheAttempt: a handler that panics on one job does
// not take the drainer down. Each panic is a failed attempt (retried with
// backoff), the job is dead-lettered with reason "panic: …" once its
// attempts run out, and every other job is delivered meanwhile.
func TestHandlerPanicFailsTheAttempt(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	q := tb.topo.ShardQueue("std", 0)
	const others = 20
	tb.enqueue(t, q, testEnvelope("t", "boom", time.Now()))
	for i := range others {
		tb.enqueue(t, q, testEnvelope("t", fmt.Sprintf("ok-%02d", i), time.Now()))
	}
	rec := newRecorder()
	handler := HandlerFunc(func(ctx context.Context, j *Job) error {
		if j.ID == "boom" {
			panic("handler bug: nil map")
		}
		return rec.Handle(ctx, j)
	})
	d := startDrainer(t, Config{
		Backend: tb.backend, Topology: tb.topo, Handler: handler, Concurrency: 4,
		Policy: sideliner.Policy{MaxAttempts: 3, RetryBase: 100 * time.Millisecond, RetryCap: 200 * time.Millisecond},
	})
	rec.waitCount(t, others)
	waitFor(t, func() bool { return d.Counts().DeadLettered == 1 })
	if c := d.Counts(); c.Panicked != 3 || c.Retried != 2 {
		t.Fatalf("counts %+v: want 3 panics, 2 retries", c)
	}
	dead := deadLetters(t, tb)
	if len(dead) != 1 {
		t.Fatalf("DLQ holds %d jobs, want 1", len(dead))
	}
	env := dead[0]
	if env.GetJobId() != "boom" || !strings.HasPrefix(env.GetDeadLetterReason(), "panic: handler bug: nil map") || env.GetAttempts() != 3 {
		t.Fatalf("dead letter %s: reason %q after %d attempts", env.GetJobId(), env.GetDeadLetterReason(), env.GetAttempts())
	}
}
