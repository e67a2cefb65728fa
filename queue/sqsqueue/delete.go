package sqsqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/queue"
)

// Delete removes received messages. Its handles join the queue's current
// DeleteMessageBatch the way Send's entries join a SendMessageBatch, so the
// single-message acks of concurrent deliveries share calls.
//
// Deletes are fenced: SQS itself does not fence them (deleting with the
// receipt handle of an earlier receive of a message that another consumer
// has since received succeeds: "the request succeeds, but the message might
// not be deleted"). A handle whose lease this backend knows to hold well
// past the delete (received, or extended, with an explicit visibility
// timeout that has not nearly run out) is deleted at once; any other is
// first checked with one ChangeMessageVisibilityBatch that sets its
// visibility to FenceVisibility (or to two CallTimeouts plus DeleteLinger,
// if longer, so that the delete lands before it runs out), and deleted
// only if its lease held. A handle whose lease is lost
// (ReceiptHandleIsInvalid, MessageNotInflight, or AWS's "receipt handle
// has expired") gets ErrReceiptInvalid and its message is left alone; an
// empty handle gets it without being sent.
// Config.SkipDeleteFencing drops the check, and stale handles then report
// success.
//
// Delete returns an error only when nothing was deleted for one cause: an
// invalid call, an unknown queue, or calls that failed whole.
func (b *Backend) Delete(ctx context.Context, params *queue.DeleteParams) ([]error, error) {
	if err := b.errIfClosed("delete"); err != nil {
		return nil, err
	}
	if params == nil {
		return nil, fmt.Errorf("sqs delete: nil params: %w", queue.ErrInvalidArgument)
	}
	if err := checkBatch("delete", params.Queue, len(params.ReceiptHandles)); err != nil {
		return nil, err
	}
	url, err := b.queueURL(ctx, params.Queue)
	if err != nil {
		return nil, err
	}
	handles := params.ReceiptHandles
	results := make([]error, len(handles))
	for i, h := range handles {
		if h == "" {
			results[i] = fmt.Errorf("sqs delete %s: empty receipt handle: %w", params.Queue, queue.ErrReceiptInvalid)
		}
	}
	if err := b.fence(ctx, params.Queue, url, handles, results); err != nil {
		return nil, err
	}

	call := &deleteCall{results: results, whole: make([]bool, len(handles))}
	items := make([]*deleteItem, 0, len(handles))
	for i, h := range handles {
		if results[i] == nil {
			items = append(items, &deleteItem{call: call, idx: i, handle: h})
		}
	}
	if len(items) == 0 {
		return results, nil
	}
	call.waiter = newWaiter(ctx, len(items))
	bt := batcherFor(b, opDeleteMessageBatch, params.Queue, url, func() *batcher[*deleteItem] {
		return &batcher[*deleteItem]{linger: b.cfg.DeleteLinger, flush: deleteBatch}
	})
	if !enqueue(b, bt, items) {
		return nil, fmt.Errorf("sqs delete: %w", queue.ErrClosed)
	}
	if !call.wait() {
		return nil, fmt.Errorf("sqs delete %s: %w (messages of this call may have been deleted)", params.Queue, ctx.Err())
	}
	var first error
	for i, err := range results {
		if !call.whole[i] || err == nil || (first != nil && err != first) { //nolint:errorlint // the very error the whole call failed with
			return results, nil
		}
		first = err
	}
	return nil, first
}

// fence checks with one ChangeMessageVisibilityBatch the leases of the
// handles not already failed in results whose lease this backend cannot
// vouch for until the delete is done, recording lost leases in results.
func (b *Backend) fence(ctx context.Context, queueName, url string, handles []string, results []error) error {
	if b.cfg.SkipDeleteFencing {
		return nil
	}
	// The delete is sent within a linger and completes within a call
	// timeout (retries included): the lease must outlast both. If any
	// handle is checked, every handle's delete waits for that check call
	// too, up to another call timeout: then the lease must outlast that
	// as well (with one call timeout, a slow check let a skipped lease run
	// out and its stale delete report success; found in review).
	now := time.Now()
	safeUntil := now.Add(max(b.cfg.DeleteLinger, 0) + b.cfg.CallTimeout)
	if slices.ContainsFunc(handles, func(h string) bool { return !b.leases.heldPast(h, safeUntil) }) {
		safeUntil = safeUntil.Add(b.cfg.CallTimeout)
	}
	fence := make([]queue.VisibilityChange, len(handles))
	checked := make([]error, len(handles))
	need := false
	for i, h := range handles {
		fence[i] = queue.VisibilityChange{ReceiptHandle: h, Timeout: b.fenceVisibility()}
		switch {
		case results[i] != nil:
			checked[i] = results[i]
		case b.leases.heldPast(h, safeUntil):
			checked[i] = errLeaseHeld // not sent
		default:
			need = true
		}
	}
	if !need {
		return nil
	}
	if err := b.changeVisibility(ctx, "delete", queueName, url, fence, checked); err != nil {
		return err
	}
	for i, err := range checked {
		if results[i] == nil && !errors.Is(err, errLeaseHeld) {
			results[i] = err
		}
	}
	return nil
}

// fenceVisibility is the visibility timeout the lease check sets: its
// answer may take a call timeout, and the delete after it a linger and
// another call timeout, so the message must stay hidden that long after
// the check was sent. (A fixed 30 s let a delete slowed by a CallTimeout
// over 15 s land after the message had come back, and report success for
// a lease another consumer held.)
func (b *Backend) fenceVisibility() time.Duration {
	return min(max(FenceVisibility, 2*b.cfg.CallTimeout+max(b.cfg.DeleteLinger, 0)), queue.MaxVisibilityTimeout)
}

// errLeaseHeld marks, in fence, the handles that need no check.
var errLeaseHeld = errors.New("lease held")

// deleteCall is one Delete call waiting for its handles' results.
type deleteCall struct {
	*waiter
	results []error
	whole   []bool // result's error is a whole-call error of its batch
}

func (c *deleteCall) set(idx int, err error, whole bool) {
	c.results[idx] = err
	c.whole[idx] = whole
	c.settled()
}

type deleteItem struct {
	call   *deleteCall
	idx    int
	handle string
}

// deleteBatch issues one DeleteMessageBatch for items and reports every
// item's outcome to its call.
func deleteBatch(bt *batcher[*deleteItem], items []*deleteItem) {
	live := items[:0:0]
	for _, it := range items {
		if err := it.call.ctx.Err(); err != nil {
			it.call.set(it.idx, fmt.Errorf("sqs delete %s: not sent: %w", bt.name, err), true)
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(live))
	for i, it := range live {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(it.handle)}
		bt.b.leases.drop(it.handle)
	}
	// The call carries several callers' entries, so it outlives any one
	// caller's context; Close waits for it, bounded by the call timeout.
	ctx, cancel := context.WithTimeout(context.Background(), bt.b.cfg.CallTimeout)
	defer cancel()
	out, err := bt.b.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(bt.url), Entries: entries},
		bt.b.count(opDeleteMessageBatch))
	if err != nil {
		err = bt.b.translate(context.Background(), "delete", bt.name, err)
		bt.b.notFound(bt.name, bt.url, err)
		for _, it := range live {
			it.call.set(it.idx, err, true)
		}
		return
	}
	results := batchResults("delete", bt.name, make([]error, len(live)), out.Successful, out.Failed,
		func(s types.DeleteMessageBatchResultEntry) *string { return s.Id })
	for i, it := range live {
		it.call.set(it.idx, results[i], false)
	}
}
