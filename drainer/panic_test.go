package drainer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	envelopev1 "github.com/sluice-dev/sluice/gen/sluice/envelope/v1"
	"github.com/sluice-dev/sluice/queue"
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
	tb.enqueue(t, q, envelope("t", "boom", time.Now()))
	for i := range others {
		tb.enqueue(t, q, envelope("t", fmt.Sprintf("ok-%02d", i), time.Now()))
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
	msgs, err := tb.backend.Receive(t.Context(), &queue.ReceiveParams{Queue: tb.topo.DLQ("std"), Max: 10, VisibilityTimeout: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("DLQ read: %v, %d messages", err, len(msgs))
	}
	var env envelopev1.Envelope
	if err := proto.Unmarshal(msgs[0].Body, &env); err != nil {
		t.Fatal(err)
	}
	if env.GetJobId() != "boom" || !strings.HasPrefix(env.GetDeadLetterReason(), "panic: handler bug: nil map") || env.GetAttempts() != 3 {
		t.Fatalf("dead letter %s: reason %q after %d attempts", env.GetJobId(), env.GetDeadLetterReason(), env.GetAttempts())
	}
}
