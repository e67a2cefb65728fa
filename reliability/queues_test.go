package reliability

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
)

// losingBackend loses the answer of one Receive call after the store acted
// on it, and tries again, as the SQS SDK does when it cannot read a 200
// (aws/aws-sdk-go-v2#1825): the messages of the lost answer stay hidden
// for the visibility timeout.
type losingBackend struct {
	queue.Backend
	calls, lose int32
	lost        atomic.Int32
}

func (b *losingBackend) Receive(ctx context.Context, p *queue.ReceiveParams) ([]queue.Message, error) {
	b.calls++
	if b.calls == b.lose {
		msgs, err := b.Backend.Receive(ctx, p)
		if err != nil {
			return nil, err
		}
		b.lost.Store(int32(len(msgs)))
	}
	return b.Backend.Receive(ctx, p)
}

// TestReadQueueSurvivesALostAnswer: a lost Receive answer hides a batch;
// the read must wait for it to come back instead of reporting those jobs
// missing (the cause of the "lost" poison jobs of the fault runs).
func TestReadQueueSurvivesALostAnswer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "queues.db"), embeddedqueue.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const name, jobs = "rel-dlq", 45
	if err := store.EnsureQueues(ctx, []queue.QueueSpec{{Name: name, VisibilityTimeout: time.Minute, Retention: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		body, err := envelope.Encode(&envelope.Envelope{JobId: fmt.Sprintf("job-%02d", i), Tenant: "t", Payload: []byte("p"), EnqueuedAt: timestamppb.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Send(ctx, &queue.SendParams{Queue: name, Entries: []queue.SendEntry{{ID: "0", Body: body}}}); err != nil {
			t.Fatal(err)
		}
	}
	b := &losingBackend{Backend: store, lose: 2}
	start := time.Now()
	read, hidden, err := readQueue(ctx, b, name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.lost.Load() == 0 {
		t.Fatal("no answer was lost: the test did not exercise the case")
	}
	ids := map[string]bool{}
	for _, d := range read {
		ids[d.JobID] = true
	}
	if len(read) != jobs || len(ids) != jobs || hidden != 0 {
		t.Fatalf("read %d messages (%d distinct jobs), %d hidden before; want %d, %d, 0 (an answer of %d was lost after %s)",
			len(read), len(ids), hidden, jobs, jobs, b.lost.Load(), time.Since(start))
	}
}
