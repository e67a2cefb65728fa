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

// TestDeleteFenceOutlastsSlowCalls: a fenced Delete hides the message
// with its check, then deletes it; with a CallTimeout of 20 s both calls
// may take nearly that long (throttling retries), so the delete can land
// up to two call timeouts after the check. The check used to hide the
// message for FenceVisibility (30 s) whatever the call timeout: here the
// check's answer takes 17 s and the delete 17 s more, the message came
// back at 30 s, another consumer received it, and the stale delete still
// reported success (SQS does not fence deletes). Now the check hides it
// for at least two call timeouts and the linger, so the delete lands
// under the lease it checked.
func TestDeleteFenceOutlastsSlowCalls(t *testing.T) {
	t.Parallel()
	const callTimeout, slow = 20 * time.Second, 17 * time.Second
	var armed atomic.Bool
	client := rawClient(t, func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("testSlowAnswers",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					wait := func() error {
						select {
						case <-time.After(slow):
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					if !armed.Load() {
						return next.HandleInitialize(ctx, in)
					}
					switch awsmiddleware.GetOperationName(ctx) {
					case "ChangeMessageVisibilityBatch": // applied at once, answered late
						out, md, err := next.HandleInitialize(ctx, in)
						if werr := wait(); werr != nil {
							return out, md, werr
						}
						return out, md, err
					case "DeleteMessageBatch": // sent late
						if err := wait(); err != nil {
							return middleware.InitializeOutput{}, middleware.Metadata{}, err
						}
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.After)
		})
	})
	b := newBackend(t, func(c *sqsqueue.Config) {
		c.Client = client
		c.CallTimeout = callTimeout
		c.DeleteLinger = -1
	})
	other := newBackend(t)
	q := uniqueName("fenceslow")
	ensure(t, b, queue.QueueSpec{Name: q})
	send(t, b, q, []byte("A"))
	// The queue's default visibility: the backend cannot vouch for the
	// lease, so the Delete checks it.
	got, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 1, Wait: time.Second})
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %d", err, len(got))
	}

	deleted := make(chan struct{})
	stolen := make(chan queue.Message, 1)
	go func() {
		defer close(stolen)
		for {
			m, err := other.Receive(context.Background(), &queue.ReceiveParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
			if err == nil && len(m) == 1 {
				stolen <- m[0]
				return
			}
			select {
			case <-deleted:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	armed.Store(true)
	errs, err := b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: []string{got[0].ReceiptHandle}})
	close(deleted)
	m, ok := <-stolen
	switch {
	case err != nil:
		t.Fatalf("Delete: %v", err)
	case ok && errs[0] == nil:
		t.Errorf("Delete reported success although the fence ran out and another consumer received the message (receive count %d)", m.ReceiveCount)
	case ok:
		t.Errorf("the fence ran out before the delete: another consumer received the message (receive count %d); Delete: %v", m.ReceiveCount, errs[0])
	case errs[0] != nil:
		t.Errorf("Delete: %v, want the message deleted under the lease it checked", errs[0])
	}
}
