package admin

import (
	"context"
	"testing"
	"time"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// sendThenDelete hides the embedded store's one-step Move, so a replay
// sends and then deletes as on SQS; a send to a shard signals sending and
// waits for proceed before it goes through.
type sendThenDelete struct {
	backend          queue.Backend
	dlq              string
	sending, proceed chan struct{}
}

func (b *sendThenDelete) EnsureQueues(ctx context.Context, s []queue.QueueSpec) error {
	return b.backend.EnsureQueues(ctx, s)
}

func (b *sendThenDelete) Receive(ctx context.Context, p *queue.ReceiveParams) ([]queue.Message, error) {
	return b.backend.Receive(ctx, p)
}

func (b *sendThenDelete) Delete(ctx context.Context, p *queue.DeleteParams) ([]error, error) {
	return b.backend.Delete(ctx, p)
}

func (b *sendThenDelete) ChangeVisibility(ctx context.Context, p *queue.ChangeVisibilityParams) ([]error, error) {
	return b.backend.ChangeVisibility(ctx, p)
}

func (b *sendThenDelete) Stats(ctx context.Context, p *queue.StatsParams) ([]queue.Stats, error) {
	return b.backend.Stats(ctx, p)
}
func (b *sendThenDelete) Close() error { return nil }
func (b *sendThenDelete) Send(ctx context.Context, p *queue.SendParams) ([]queue.SendResult, error) {
	if p.Queue != b.dlq {
		b.sending <- struct{}{}
		<-b.proceed
	}
	// The send reaches the queue whatever became of ctx meanwhile, as
	// one already on the wire does.
	return b.backend.Send(context.WithoutCancel(ctx), p)
}

// TestCancelDoesNotSplitAMove cancels a replay while it sends a job back
// (send, then delete, as on SQS). The cancel reached the delete, which
// failed, so the job was both on its shard and still in the DLQ, to be
// replayed and delivered a second time. A move that has begun must
// finish; the cancel stops the replay before the next job.
func TestCancelDoesNotSplitAMove(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	deadLetters(t, tb, time.Now().Add(-time.Hour), 3, "a")
	b := &sendThenDelete{backend: tb.Backend, dlq: tb.Topo.DLQ("std"), sending: make(chan struct{}), proceed: make(chan struct{})}
	if _, ok := queue.Backend(b).(queue.Mover); ok {
		t.Fatal("the wrapper still moves in one step")
	}
	a := NewServer(b, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"a"}}, RatePerSecond: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetReplay().GetId()
	<-b.sending
	a.replays.mu.Lock()
	run := a.replays.runs[id]
	a.replays.mu.Unlock()
	run.cancel() // what CancelReplay does, while the send is under way
	close(b.proceed)
	r := waitReplay(t, a, id)
	if r.GetState() != adminv1.Replay_STATE_CANCELLED || r.GetMoved() != 1 {
		t.Errorf("replay after a cancel during its first move: %s, moved %d; want cancelled with that one move done", r.GetState(), r.GetMoved())
	}
	var onShards int64
	for i := range 4 {
		onShards += tb.Stats(t, tb.Topo.ShardQueue("std", i)).Visible
	}
	dlq := tb.Stats(t, tb.Topo.DLQ("std"))
	if onShards != 1 || dlq.Visible+dlq.InFlight != 2 {
		t.Errorf("%d jobs on the shards and %d visible + %d held in the DLQ; want the moved job only on its shard (1) and the other 2 in the DLQ", onShards, dlq.Visible, dlq.InFlight)
	}
}
