package sqsqueue_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
)

// TestRedriveStatusAndCancel follows and stops move tasks against
// local-aws-sqs, which serves ListMessageMoveTasks and
// CancelMessageMoveTask: a slow task (1 message a second) is listed as
// running with its handle and counts, is cancelled part way, and ends
// CANCELLED with the rest still in the DLQ; a second task moves the rest
// and ends COMPLETED, listed newest first; a task over messages sent
// straight to the DLQ (no source to return to) ends FAILED with SQS's
// reason. Cancelling a handle of no running task is ErrTaskNotFound (or,
// from local-aws-sqs for a finished task, ErrInvalidArgument), and a
// malformed handle ErrInvalidArgument.
func TestRedriveStatusAndCancel(t *testing.T) {
	t.Parallel()
	b := moveTaskBackend(t)
	ctx := t.Context()
	if err := b.EnsureQueues(ctx, []queue.QueueSpec{
		{Name: "status-dlq"},
		{Name: "status-src", VisibilityTimeout: time.Second, DeadLetterQueue: "status-dlq", MaxReceiveCount: 1},
		{Name: "orphan-dlq"},
		{Name: "orphan-src", DeadLetterQueue: "orphan-dlq", MaxReceiveCount: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if tasks, err := b.ListRedrives(ctx, "status-dlq"); err != nil || len(tasks) != 0 {
		t.Fatalf("ListRedrives before any task: %v, %v; want none", tasks, err)
	}
	if _, err := b.ListRedrives(ctx, "no-such-dlq"); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Fatalf("ListRedrives of a missing queue: %v, want ErrQueueNotFound", err)
	}

	const n = 6
	deadLetter(ctx, t, b, "status-src", "status-dlq", n)
	started := time.Now()
	task, err := b.StartRedrive(ctx, "status-dlq", 1)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := b.ListRedrives(ctx, "status-dlq")
	if err != nil || len(tasks) != 1 {
		t.Fatalf("ListRedrives of a running task: %+v, %v", tasks, err)
	}
	got := tasks[0]
	if got.Task != task || got.Status != queue.RedriveRunning || got.ToMove != n || got.MaxPerSecond != 1 || got.Moved >= n ||
		got.Started.Before(started.Add(-time.Minute)) || got.Started.After(time.Now().Add(time.Minute)) {
		t.Fatalf("running task listed as %+v; want handle %q, RUNNING, %d to move at 1/s, started about %s", got, task, n, started)
	}
	moved, err := b.CancelRedrive(ctx, task)
	if err != nil || moved >= n {
		t.Fatalf("CancelRedrive of the running task: moved %d, %v; want fewer than %d and no error", moved, err, n)
	}
	waitUntil(t, func() bool {
		tasks, err = b.ListRedrives(ctx, "status-dlq")
		return err == nil && len(tasks) == 1 && tasks[0].Status == queue.RedriveCancelled
	})
	if tasks[0].Task != "" || tasks[0].Moved >= n {
		t.Fatalf("cancelled task listed as %+v; want no handle and fewer than %d moved", tasks[0], n)
	}
	left := n - tasks[0].Moved
	if s, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{"status-dlq"}}); err != nil || s[0].Visible != left {
		t.Fatalf("DLQ after the cancel: %+v, %v; want %d still there", s, err, left)
	}
	_, err = b.CancelRedrive(ctx, task)
	// AWS answers ResourceNotFoundException for a task no longer running;
	// local-aws-sqs answers InvalidParameterValue "Only active tasks can be
	// cancelled."
	if !errors.Is(err, queue.ErrTaskNotFound) && !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("CancelRedrive of a cancelled task: %v, want ErrTaskNotFound or ErrInvalidArgument", err)
	}

	// The rest, as fast as it goes: COMPLETED, listed before the other.
	second, err := b.StartRedrive(ctx, "status-dlq", 0)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		tasks, err = b.ListRedrives(ctx, "status-dlq")
		return err == nil && len(tasks) == 2 && tasks[0].Status == queue.RedriveCompleted
	})
	if tasks[0].Moved != left || tasks[0].ToMove != left || tasks[1].Status != queue.RedriveCancelled {
		t.Fatalf("after a second task: %+v; want it first, COMPLETED with %d moved, then the CANCELLED one", tasks, left)
	}
	if _, err := b.CancelRedrive(ctx, second); !errors.Is(err, queue.ErrTaskNotFound) && !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("CancelRedrive of a completed task: %v, want ErrTaskNotFound or ErrInvalidArgument", err)
	}

	// A well-formed handle of no task, and one that is not a handle.
	arn := "arn:aws:sqs:" + fauxqs.Region + ":" + fauxqs.AccountID + ":status-dlq"
	unknown := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, `{"taskId":"00000000-0000-0000-0000-000000000000","sourceArn":%q}`, arn))
	if _, err := b.CancelRedrive(ctx, unknown); !errors.Is(err, queue.ErrTaskNotFound) {
		t.Fatalf("CancelRedrive of an unknown task: %v, want ErrTaskNotFound", err)
	}
	if _, err := b.CancelRedrive(ctx, "not-a-task-handle"); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("CancelRedrive of a malformed handle: %v, want ErrInvalidArgument", err)
	}

	// A message sent straight to a DLQ has no source queue to go back to.
	if res, err := b.Send(ctx, &queue.SendParams{Queue: "orphan-dlq", Entries: []queue.SendEntry{{ID: "0", Body: []byte("x")}}}); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if _, err := b.StartRedrive(ctx, "orphan-dlq", 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		tasks, err = b.ListRedrives(ctx, "orphan-dlq")
		return err == nil && len(tasks) == 1 && tasks[0].Status == queue.RedriveFailed
	})
	if tasks[0].FailureReason == "" {
		t.Fatalf("failed task listed as %+v, want a failure reason", tasks[0])
	}

	calls := b.APICalls()
	if calls[sqsqueue.OpListMessageMoveTasks] < 4 || calls[sqsqueue.OpCancelMessageMoveTask] != 5 {
		t.Fatalf("calls counted: %d ListMessageMoveTasks, %d CancelMessageMoveTask; want at least 4 and 5", calls[sqsqueue.OpListMessageMoveTasks], calls[sqsqueue.OpCancelMessageMoveTask])
	}
}

// deadLetter sends n messages to src and receives them until SQS has
// redriven them all to dlq (src's maxReceiveCount is 1, its visibility
// timeout short).
func deadLetter(ctx context.Context, t *testing.T, b *sqsqueue.Backend, src, dlq string, n int) {
	t.Helper()
	entries := make([]queue.SendEntry, n)
	for i := range entries {
		entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: fmt.Appendf(nil, "job-%d", i)}
	}
	if res, err := b.Send(ctx, &queue.SendParams{Queue: src, Entries: entries}); err != nil {
		t.Fatal(err)
	} else {
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	waitUntil(t, func() bool {
		if _, err := b.Receive(ctx, &queue.ReceiveParams{Queue: src, Max: 10}); err != nil {
			t.Fatal(err)
		}
		s, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{dlq}})
		return err == nil && s[0].Visible == int64(n)
	})
}
