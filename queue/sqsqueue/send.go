package sqsqueue

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/queue"
)

// Send stores messages. Its entries join the queue's current batch, which
// goes out as one SendMessageBatch when it holds queue.MaxBatch entries or
// MaxBatchPayloadBytes of encoded bodies, or Config.Linger after its first
// entry, whichever comes first; so concurrent single-entry Sends to a queue
// share API calls. Each result reports its own entry's outcome, including
// per-entry failures of a batch that partly succeeded; they are not retried
// here. A body too large gets ErrBodyTooLarge in its result and is not sent;
// the call's other entries are. Send returns an error only when nothing was
// stored: invalid arguments (checked before any call), an unknown queue, or
// SendMessageBatch calls that failed whole, with one error, for every entry.
//
// Bodies are sent base64-encoded, so a body is limited to MaxRawBodyBytes
// (its encoding to MaxEncodedBodyBytes) as well as queue.MaxBodyBytes.
//
// If ctx ends while entries are in a batch under way, Send returns ctx's
// error at once and those messages may still be stored (at-least-once).
// Entries whose batch had not yet gone out are not sent.
func (b *Backend) Send(ctx context.Context, params *queue.SendParams) ([]queue.SendResult, error) {
	if err := b.errIfClosed("send"); err != nil {
		return nil, err
	}
	bodies, tooLarge, err := validateSend(params)
	if err != nil {
		return nil, err
	}
	url, err := b.queueURL(ctx, params.Queue)
	if err != nil {
		return nil, err
	}

	call := &sendCall{
		results: make([]queue.SendResult, len(params.Entries)),
		whole:   make([]bool, len(params.Entries)),
	}
	items := make([]*sendItem, 0, len(params.Entries))
	for i, e := range params.Entries {
		call.results[i].ID = e.ID
		if tooLarge[i] != nil {
			call.results[i].Err = tooLarge[i]
			continue
		}
		items = append(items, &sendItem{call: call, idx: i, body: bodies[i], delay: ceilSeconds(e.Delay), group: e.GroupID})
	}
	if len(items) == 0 {
		return call.results, nil
	}
	call.waiter = newWaiter(ctx, len(items))
	bt := batcherFor(b, opSendMessageBatch, params.Queue, url, func() *batcher[*sendItem] {
		return &batcher[*sendItem]{size: func(it *sendItem) int { return len(it.body) }, linger: b.cfg.Linger, flush: sendBatch}
	})
	if !enqueue(b, bt, items) {
		return nil, fmt.Errorf("sqs send: %w", queue.ErrClosed)
	}
	if !call.wait() {
		return nil, fmt.Errorf("sqs send %s: %w (messages of this call may have been stored)", params.Queue, ctx.Err())
	}
	// Nothing stored and one cause for all: report it as the call's error.
	var first error
	for i, r := range call.results {
		if !call.whole[i] || r.Err == nil || (first != nil && r.Err != first) { //nolint:errorlint // the very error the whole call failed with
			return call.results, nil
		}
		first = r.Err
	}
	return nil, first
}

// validateSend checks params against the queue contract and SQS's limits.
// Errors of the whole call (entry count, duplicate ids, delays) are
// returned; a body too large is an error of its entry only, in tooLarge.
// It returns the base64-encoded bodies.
func validateSend(params *queue.SendParams) (bodies []string, tooLarge []error, err error) {
	if params == nil {
		return nil, nil, fmt.Errorf("sqs send: nil params: %w", queue.ErrInvalidArgument)
	}
	if err := checkBatch("send", params.Queue, len(params.Entries)); err != nil {
		return nil, nil, err
	}
	n := len(params.Entries)
	seen := make(map[string]bool, n)
	bodies = make([]string, n)
	tooLarge = make([]error, n)
	for i, e := range params.Entries {
		if seen[e.ID] {
			return nil, nil, fmt.Errorf("sqs send %s: duplicate entry id %q: %w", params.Queue, e.ID, queue.ErrInvalidArgument)
		}
		seen[e.ID] = true
		if e.Delay < 0 || e.Delay > queue.MaxDelay {
			return nil, nil, fmt.Errorf("sqs send %s: entry %q: delay %s outside 0 to %s: %w",
				params.Queue, e.ID, e.Delay, queue.MaxDelay, queue.ErrInvalidArgument)
		}
		enc := base64.StdEncoding.EncodedLen(len(e.Body))
		switch {
		case len(e.Body) > queue.MaxBodyBytes:
			tooLarge[i] = fmt.Errorf("sqs send %s: entry %q: body is %d bytes, limit %d: %w",
				params.Queue, e.ID, len(e.Body), queue.MaxBodyBytes, queue.ErrBodyTooLarge)
		case enc > MaxEncodedBodyBytes:
			tooLarge[i] = fmt.Errorf("sqs send %s: entry %q: body is %d bytes, %d once base64-encoded; SQS takes at most %d "+
				"(raw bodies up to %d bytes): %w",
				params.Queue, e.ID, len(e.Body), enc, MaxEncodedBodyBytes, MaxRawBodyBytes, queue.ErrBodyTooLarge)
		default:
			bodies[i] = base64.StdEncoding.EncodeToString(e.Body)
		}
	}
	return bodies, tooLarge, nil
}

// sendCall is one Send call waiting for its entries' results.
type sendCall struct {
	*waiter
	results []queue.SendResult
	whole   []bool // result's error is a whole-call error of its batch
}

func (c *sendCall) set(idx int, messageID string, err error, whole bool) {
	c.results[idx].MessageID = messageID
	c.results[idx].Err = err
	c.whole[idx] = whole
	c.settled()
}

type sendItem struct {
	call  *sendCall
	idx   int
	body  string // base64
	delay int32  // seconds
	group string // MessageGroupId, "" for none
}

// sendBatch issues one SendMessageBatch for items and reports every item's
// outcome to its call: never is an entry left without a result.
func sendBatch(bt *batcher[*sendItem], items []*sendItem) {
	live := items[:0:0]
	for _, it := range items {
		if err := it.call.ctx.Err(); err != nil {
			it.call.set(it.idx, "", fmt.Errorf("sqs send %s: not sent: %w", bt.name, err), true)
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(live))
	for i, it := range live {
		entries[i] = types.SendMessageBatchRequestEntry{
			Id:          aws.String(strconv.Itoa(i)),
			MessageBody: aws.String(it.body),
		}
		if it.delay > 0 {
			entries[i].DelaySeconds = it.delay
		}
		if it.group != "" {
			// On a standard queue this makes Amazon SQS fair queues
			// reorder deliveries by tenant (the group).
			entries[i].MessageGroupId = aws.String(it.group)
		}
	}
	// The call outlives any one caller's context (it carries several
	// callers' entries); Close waits for it, bounded by the call timeout.
	ctx, cancel := context.WithTimeout(context.Background(), bt.b.cfg.CallTimeout)
	defer cancel()
	out, err := bt.b.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{
		QueueUrl: aws.String(bt.url),
		Entries:  entries,
	}, bt.b.count(opSendMessageBatch))
	if err != nil {
		err = bt.b.translate(context.Background(), "send", bt.name, err)
		if errors.Is(err, queue.ErrQueueNotFound) {
			bt.b.forgetURL(bt.name, bt.url)
		}
		for _, it := range live {
			it.call.set(it.idx, "", err, true)
		}
		return
	}
	reported := make([]bool, len(live))
	for _, s := range out.Successful {
		i, ok := entryIndex(s.Id, len(live))
		if !ok || reported[i] {
			continue
		}
		reported[i] = true
		live[i].call.set(live[i].idx, aws.ToString(s.MessageId), nil, false)
	}
	for _, f := range out.Failed {
		i, ok := entryIndex(f.Id, len(live))
		if !ok || reported[i] {
			continue
		}
		reported[i] = true
		live[i].call.set(live[i].idx, "", entryError("send", bt.name, f.Code, f.Message, f.SenderFault), false)
	}
	for i, it := range live {
		if !reported[i] {
			it.call.set(it.idx, "", fmt.Errorf("sqs send %s: entry missing from SendMessageBatch response: %w",
				bt.name, queue.ErrUnavailable), false)
		}
	}
}

// entryIndex parses a batch entry id this package assigned ("0".."9").
func entryIndex(id *string, n int) (int, bool) {
	i, err := strconv.Atoi(aws.ToString(id))
	return i, err == nil && i >= 0 && i < n
}

// entryError translates one failed entry of a batch call.
func entryError(op, queueName string, code, message *string, senderFault bool) error {
	c, m := aws.ToString(code), aws.ToString(message)
	cause := fmt.Errorf("%s: %s (sender fault: %t)", c, m, senderFault)
	if s := sentinelFor(c, m, senderFault); s != nil {
		return fmt.Errorf("sqs %s %s: %w: %w", op, queueName, s, cause)
	}
	return fmt.Errorf("sqs %s %s: %w", op, queueName, cause)
}

// ceilSeconds rounds d up to whole seconds, as SQS takes durations.
func ceilSeconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32((d + time.Second - 1) / time.Second)
}
