package drainer

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// TestHeartbeatHoldsTheLease runs a lease's heartbeat in a synctest bubble
// on a real embedded backend: while it beats, a job held three times its
// visibility timeout stays hidden from other consumers; once it stops, the
// job comes back after the timeout. Time is the point, so it is fake: the
// test takes no wall-clock time and cannot flake under load.
func TestHeartbeatHoldsTheLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tb := topotest.Setup(t, topotest.OneLane)
		q := tb.Topo.ShardQueue("std", 0)
		tb.Enqueue(t, q, topotest.Envelope("t", "long", time.Now()))
		const vis = 3 * time.Second
		receive := func() []queue.Message {
			t.Helper()
			msgs, err := tb.Backend.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 1, VisibilityTimeout: vis})
			if err != nil {
				t.Fatal(err)
			}
			return msgs
		}
		held := receive()
		if len(held) != 1 {
			t.Fatalf("received %d messages, want 1", len(held))
		}
		l := &lease{backend: tb.Backend, queue: q, receipt: held[0].ReceiptHandle}
		stop := l.heartbeat(vis, func(err error) { t.Errorf("lease lost while beating: %v", err) })
		time.Sleep(3 * vis)
		synctest.Wait()
		if got := receive(); len(got) != 0 {
			t.Fatalf("another consumer received the held job after %s", 3*vis)
		}
		stop()
		time.Sleep(vis + time.Second)
		if got := receive(); len(got) != 1 {
			t.Fatalf("the job did not come back %s after the heartbeat stopped", vis+time.Second)
		}
		if err := l.ack(t.Context()); err == nil {
			t.Fatal("the old holder acked a job another consumer now holds")
		}
	})
}
