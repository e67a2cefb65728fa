package sqsqueue_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
)

// TestStartRedrive runs the one path fauxqs does not serve,
// StartMessageMoveTask, against local-aws-sqs: a message redriven to the
// DLQ after too many receives goes back to its source queue unchanged.
func TestStartRedrive(t *testing.T) {
	t.Parallel()
	b := moveTaskBackend(t)
	ctx := t.Context()
	if err := b.EnsureQueues(ctx, []queue.QueueSpec{
		{Name: "redrive-dlq"},
		{Name: "redrive-src", VisibilityTimeout: time.Second, DeadLetterQueue: "redrive-dlq", MaxReceiveCount: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if res, err := b.Send(ctx, &queue.SendParams{Queue: "redrive-src", Entries: []queue.SendEntry{{ID: "0", Body: []byte{0, 1, 2, 'x'}}}}); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	receive := func(q string) []queue.Message {
		msgs, err := b.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1})
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	// Receive it once, let the lease lapse: the next receive redrives it.
	waitUntil(t, func() bool { return len(receive("redrive-src")) == 1 })
	waitUntil(t, func() bool {
		_ = receive("redrive-src")
		s, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{"redrive-dlq"}})
		return err == nil && s[0].Visible == 1
	})
	task, err := b.StartRedrive(ctx, "redrive-dlq", 10)
	if err != nil || task == "" {
		t.Fatalf("StartRedrive: %q, %v", task, err)
	}
	var back []queue.Message
	waitUntil(t, func() bool {
		back = receive("redrive-src")
		return len(back) == 1
	})
	if string(back[0].Body) != "\x00\x01\x02x" {
		t.Fatalf("redriven body %q", back[0].Body)
	}
	if calls := b.APICalls()[sqsqueue.OpStartMessageMoveTask]; calls != 1 {
		t.Fatalf("%d StartMessageMoveTask calls counted", calls)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// moveTaskBackend starts local-aws-sqs, the second local server, which
// serves the message move tasks fauxqs does not, for t, and returns a
// backend on it.
func moveTaskBackend(t *testing.T) *sqsqueue.Backend {
	t.Helper()
	srv, err := fauxqs.StartMoveTaskServer(t.Context(), nil)
	if err != nil {
		t.Fatalf("start local-aws-sqs: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	b, err := sqsqueue.New(t.Context(), sqsqueue.Config{Endpoint: srv.Endpoint, Region: fauxqs.Region, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
