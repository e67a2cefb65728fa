package sqsqueue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
)

// slowClient delays ChangeMessageVisibilityBatch and DeleteMessageBatch by
// *delay (each still well within the backend's CallTimeout), as throttling
// retries would.
func slowClient(t *testing.T, delay *atomic.Int64) *sqs.Client {
	t.Helper()
	return rawClient(t, func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("testDelay",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					switch awsmiddleware.GetOperationName(ctx) {
					case "ChangeMessageVisibilityBatch", "DeleteMessageBatch":
						select {
						case <-time.After(time.Duration(delay.Load())):
						case <-ctx.Done():
							return middleware.InitializeOutput{}, middleware.Metadata{}, ctx.Err()
						}
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.After)
		})
	})
}

// TestDeleteFenceCoversTheCheckCall: a Delete of a handle whose lease
// the backend vouches for together with one that needs the fencing call,
// both calls slow (2.8 s of a 3 s call timeout). The first handle's
// delete waits for the check call as well; the lease it was skipped for
// covered only the linger and one call, so it ran out, another consumer
// received the message, and the stale delete still reported success
// (found in review). Now either the delete succeeds under a lease that
// held, and no one else gets the message, or it reports the lease lost.
func TestDeleteFenceCoversTheCheckCall(t *testing.T) {
	t.Parallel()
	var delay atomic.Int64
	b := newBackend(t, func(c *sqsqueue.Config) {
		c.Client = slowClient(t, &delay)
		c.CallTimeout = 3 * time.Second
		c.DeleteLinger = -1
	})
	other := newBackend(t)
	q := uniqueName("fencewin")
	ensure(t, b, queue.QueueSpec{Name: q})
	send(t, b, q, []byte("A"))
	a, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 1, VisibilityTimeout: 4 * time.Second})
	if err != nil || len(a) != 1 {
		t.Fatalf("receive A: %v %d", err, len(a))
	}
	t0 := time.Now()
	send(t, b, q, []byte("B"))
	bm, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 1, Wait: time.Second}) // queue default: must be fenced
	if err != nil || len(bm) != 1 {
		t.Fatalf("receive B: %v %d", err, len(bm))
	}

	// Another consumer takes A as soon as its 4 s lease runs out.
	got := make(chan queue.Message, 1)
	go func() {
		for time.Since(t0) < 8*time.Second {
			m, err := other.Receive(context.Background(), &queue.ReceiveParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
			if err == nil && len(m) == 1 {
				got <- m[0]
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		close(got)
	}()

	delay.Store(int64(2800 * time.Millisecond))
	errs, err := b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: []string{a[0].ReceiptHandle, bm[0].ReceiptHandle}})
	m, ok := <-got
	switch {
	case ok && err == nil && errs[0] == nil:
		t.Errorf("Delete reported success for A's handle although another consumer received A (receive count %d) after its lease ran out", m.ReceiveCount)
	case err != nil:
		t.Errorf("Delete: %v", err)
	case ok && !errors.Is(errs[0], queue.ErrReceiptInvalid):
		t.Errorf("A, received again by another consumer: %v, want ErrReceiptInvalid", errs[0])
	case !ok && errs[0] != nil:
		t.Errorf("A: %v, want it deleted (no one else received it)", errs[0])
	}
}
