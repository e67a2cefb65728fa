package sqsqueue

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sluice-dev/sluice/queue"
)

// queueURL returns the URL of the named queue: from Config.QueueURLs, the
// cache, or GetQueueUrl (whose answer is cached).
func (b *Backend) queueURL(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("sqs: empty queue name: %w", queue.ErrInvalidArgument)
	}
	b.mu.Lock()
	url, ok := b.urls[name]
	b.mu.Unlock()
	if ok {
		return url, nil
	}
	cctx, cancel := b.callCtx(ctx, 0)
	defer cancel()
	out, err := b.client.GetQueueUrl(cctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)}, b.count(opGetQueueURL))
	if err != nil {
		return "", b.translate(ctx, "get queue url", name, err)
	}
	url = aws.ToString(out.QueueUrl)
	b.rememberURL(name, url)
	return url, nil
}

var _ queue.Lister = (*Backend)(nil)

// ListQueues returns, sorted, the names of the queues whose names start
// with prefix (ListQueues, a page of up to 1,000 at a time), and caches
// their URLs. SQS lists a queue created within the last minute or so only
// eventually.
func (b *Backend) ListQueues(ctx context.Context, prefix string) ([]string, error) {
	if err := b.errIfClosed("list queues"); err != nil {
		return nil, err
	}
	var names []string
	in := &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(1000)}
	for {
		cctx, cancel := b.callCtx(ctx, 0)
		out, err := b.client.ListQueues(cctx, in, b.count(opListQueues))
		cancel()
		if err != nil {
			return nil, b.translate(ctx, "list queues", prefix, err)
		}
		for _, url := range out.QueueUrls {
			name := url[strings.LastIndexByte(url, '/')+1:]
			if strings.HasPrefix(name, prefix) { // a URL of another shape is skipped
				names = append(names, name)
				b.rememberURL(name, url)
			}
		}
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	slices.Sort(names)
	return names, nil
}

func (b *Backend) rememberURL(name, url string) {
	b.mu.Lock()
	b.urls[name] = url
	b.mu.Unlock()
}

// forgetURL drops a cached URL that SQS said names no queue, so that the
// next call looks the name up again (the queue may have been recreated).
func (b *Backend) forgetURL(name, url string) {
	b.mu.Lock()
	if b.urls[name] == url {
		delete(b.urls, name)
		delete(b.arns, name)
	}
	b.mu.Unlock()
}

// notFound forgets name's URL when err says the queue does not exist.
func (b *Backend) notFound(name, url string, err error) {
	if errors.Is(err, queue.ErrQueueNotFound) {
		b.forgetURL(name, url)
	}
}

// systemAttributes are the message attributes Receive asks for.
var systemAttributes = []types.MessageSystemAttributeName{
	types.MessageSystemAttributeNameApproximateReceiveCount,
	types.MessageSystemAttributeNameSentTimestamp,
}

// receiveGrace is how long a Receive's call goes on after its caller's
// ctx ends (see Receive): ample for an answer under way, which takes a
// few milliseconds, and a short hold on a stopping drainer's long polls.
const receiveGrace = 500 * time.Millisecond

// Receive is one ReceiveMessage call: long polling for params.Wait
// (rounded up to whole seconds), at most params.Max messages, hiding them
// for params.VisibilityTimeout (rounded up to whole seconds) or the queue's
// default. SQS moves a message past its queue's maxReceiveCount to the
// dead-letter queue itself. Bodies are base64-decoded; a body that is not
// base64 (a message not sent through this package) is returned as it is,
// with a warning logged.
//
// SQS omits a wait of 0 from the request, so the queue's
// ReceiveMessageWaitTimeSeconds applies then; EnsureQueues sets it to 0.
//
// A call whose ctx ends while it is under way goes on for receiveGrace,
// and the messages it brings back then are returned with no error (none
// is ctx's error): messages SQS answered with and the caller never read
// would stay hidden for their visibility timeout. A ctx that has already
// ended starts no call.
func (b *Backend) Receive(ctx context.Context, params *queue.ReceiveParams) ([]queue.Message, error) {
	if err := b.errIfClosed("receive"); err != nil {
		return nil, err
	}
	if params == nil {
		return nil, fmt.Errorf("sqs receive: nil params: %w", queue.ErrInvalidArgument)
	}
	switch {
	case params.Max < 1 || params.Max > queue.MaxBatch:
		return nil, fmt.Errorf("sqs receive %s: max %d outside 1 to %d: %w", params.Queue, params.Max, queue.MaxBatch, queue.ErrInvalidArgument)
	case params.Wait < 0 || params.Wait > queue.MaxWait:
		return nil, fmt.Errorf("sqs receive %s: wait %s outside 0 to %s: %w", params.Queue, params.Wait, queue.MaxWait, queue.ErrInvalidArgument)
	case params.VisibilityTimeout < 0 || params.VisibilityTimeout > queue.MaxVisibilityTimeout:
		return nil, fmt.Errorf("sqs receive %s: visibility timeout %s outside 0 to %s: %w",
			params.Queue, params.VisibilityTimeout, queue.MaxVisibilityTimeout, queue.ErrInvalidArgument)
	}
	url, err := b.queueURL(ctx, params.Queue)
	if err != nil {
		return nil, err
	}
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(url),
		MaxNumberOfMessages:         int32(params.Max),
		WaitTimeSeconds:             ceilSeconds(params.Wait),
		MessageSystemAttributeNames: systemAttributes,
	}
	if params.VisibilityTimeout > 0 {
		in.VisibilityTimeout = ceilSeconds(params.VisibilityTimeout)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqs receive %s: %w", params.Queue, err)
	}
	// The queue's own wait may apply (see above): allow the longest. The
	// call outlives ctx by receiveGrace: SQS counts the messages of an
	// answer that the client never read as received, so a call cut off
	// while it was being answered (a drainer stopping under load, its
	// pollers' long polls cancelled) would leave them hidden for their
	// whole visibility timeout. What the call brings back within the
	// grace is returned, for the caller to use or hand back; a call still
	// waiting then (a long poll of an empty queue) is cancelled.
	cctx, cancel := b.callCtx(context.WithoutCancel(ctx), queue.MaxWait)
	defer cancel()
	grace := cmp.Or(b.receiveGrace, receiveGrace)
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-cctx.Done(): // the call ended
		}
	})
	defer stopGrace()
	if b.receiveStarted != nil {
		b.receiveStarted()
	}
	sent := time.Now() // SQS starts the visibility timeout after this
	out, err := b.client.ReceiveMessage(cctx, in, b.count(opReceiveMessage))
	if err != nil {
		err = b.translate(ctx, "receive", params.Queue, err)
		b.notFound(params.Queue, url, err)
		return nil, err
	}
	if len(out.Messages) == 0 && ctx.Err() != nil {
		return nil, fmt.Errorf("sqs receive %s: %w", params.Queue, ctx.Err())
	}
	msgs := make([]queue.Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		msg := b.message(ctx, params.Queue, m)
		if params.VisibilityTimeout > 0 { // the queue's default is not known here
			b.leases.hold(msg.ReceiptHandle, sent.Add(time.Duration(in.VisibilityTimeout)*time.Second))
		}
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

func (b *Backend) message(ctx context.Context, queueName string, m types.Message) queue.Message {
	msg := queue.Message{
		MessageID:     aws.ToString(m.MessageId),
		ReceiptHandle: aws.ToString(m.ReceiptHandle),
	}
	raw := aws.ToString(m.Body)
	body, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		b.log.WarnContext(ctx, "sqs message body is not base64; passing it on undecoded",
			slog.String("queue", queueName), slog.String("message_id", msg.MessageID), slog.String("error", err.Error()))
		body = []byte(raw)
	}
	msg.Body = body
	if n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil {
		msg.ReceiveCount = n
	}
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		msg.SentAt = time.UnixMilli(ms)
	}
	return msg
}

// ChangeVisibility is one ChangeMessageVisibilityBatch call; timeouts are
// rounded up to whole seconds. Entries SQS reports failed with
// ReceiptHandleIsInvalid or MessageNotInflight (the lease was lost: the
// message was deleted, or its visibility expired and it was received again)
// get ErrReceiptInvalid.
func (b *Backend) ChangeVisibility(ctx context.Context, params *queue.ChangeVisibilityParams) ([]error, error) {
	if err := b.errIfClosed("change visibility"); err != nil {
		return nil, err
	}
	if params == nil {
		return nil, fmt.Errorf("sqs change visibility: nil params: %w", queue.ErrInvalidArgument)
	}
	if err := checkBatch("change visibility", params.Queue, len(params.Changes)); err != nil {
		return nil, err
	}
	for _, c := range params.Changes {
		if c.Timeout < 0 || c.Timeout > queue.MaxVisibilityTimeout {
			return nil, fmt.Errorf("sqs change visibility %s: timeout %s outside 0 to %s: %w",
				params.Queue, c.Timeout, queue.MaxVisibilityTimeout, queue.ErrInvalidArgument)
		}
	}
	url, err := b.queueURL(ctx, params.Queue)
	if err != nil {
		return nil, err
	}
	results := make([]error, len(params.Changes))
	if err := b.changeVisibility(ctx, "change visibility", params.Queue, url, params.Changes, results); err != nil {
		return nil, err
	}
	return results, nil
}

// changeVisibility makes one ChangeMessageVisibilityBatch call for the
// changes whose results entry is still nil, and records each entry's
// outcome there. It returns the error of a call that failed whole.
func (b *Backend) changeVisibility(ctx context.Context, op, queueName, url string, changes []queue.VisibilityChange, results []error) error {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, 0, len(changes))
	for i, c := range changes {
		if results[i] != nil {
			continue
		}
		if c.ReceiptHandle == "" {
			results[i] = fmt.Errorf("sqs %s %s: empty receipt handle: %w", op, queueName, queue.ErrReceiptInvalid)
			continue
		}
		entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			ReceiptHandle:     aws.String(c.ReceiptHandle),
			VisibilityTimeout: ceilSeconds(c.Timeout),
		})
	}
	if len(entries) == 0 {
		return nil
	}
	cctx, cancel := b.callCtx(ctx, 0)
	defer cancel()
	sent := time.Now()
	out, err := b.client.ChangeMessageVisibilityBatch(cctx,
		&sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries},
		b.count(opChangeMessageVisibilityBatch))
	if err != nil {
		for _, c := range changes {
			b.leases.drop(c.ReceiptHandle) // whether the change applied is unknown
		}
		err = b.translate(ctx, op, queueName, err)
		b.notFound(queueName, url, err)
		return err
	}
	batchResults(op, queueName, results, out.Successful, out.Failed,
		func(s types.ChangeMessageVisibilityBatchResultEntry) *string { return s.Id })
	for i, c := range changes {
		if results[i] == nil && c.Timeout > 0 {
			b.leases.hold(c.ReceiptHandle, sent.Add(time.Duration(ceilSeconds(c.Timeout))*time.Second))
		} else {
			b.leases.drop(c.ReceiptHandle)
		}
	}
	return nil
}

func checkBatch(op, queueName string, n int) error {
	switch {
	case n == 0:
		return fmt.Errorf("sqs %s %s: no entries: %w", op, queueName, queue.ErrInvalidArgument)
	case n > queue.MaxBatch:
		return fmt.Errorf("sqs %s %s: %d entries, at most %d: %w", op, queueName, n, queue.MaxBatch, queue.ErrBatchTooLarge)
	}
	return nil
}

// batchResults records in results (indexed by the entry ids this package
// assigned) the failures of a batch response. Entries that were sent
// (results[i] == nil before the call) and are in neither list get
// ErrUnavailable: no entry is left without an outcome.
func batchResults[S any](op, queueName string, results []error, ok []S, failed []types.BatchResultErrorEntry,
	id func(S) *string,
) []error {
	pending := make([]bool, len(results))
	for i := range results {
		pending[i] = results[i] == nil
	}
	for _, s := range ok {
		if i, valid := entryIndex(id(s), len(results)); valid {
			pending[i] = false
		}
	}
	for _, f := range failed {
		if i, valid := entryIndex(f.Id, len(results)); valid && pending[i] {
			pending[i] = false
			results[i] = entryError(op, queueName, f.Code, f.Message, f.SenderFault)
		}
	}
	for i := range results {
		if pending[i] {
			results[i] = fmt.Errorf("sqs %s %s: entry missing from response: %w", op, queueName, queue.ErrUnavailable)
		}
	}
	return results
}

// statsAttributes are the queue attributes Stats reads.
var statsAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// Stats makes one GetQueueAttributes call per queue (up to
// Config.StatsConcurrency at once): Visible is ApproximateNumberOfMessages,
// InFlight …NotVisible, Delayed …Delayed. The counts are approximate (SQS
// says they converge within about a minute). OldestAge is always 0: SQS has
// no queue attribute for it, only the CloudWatch metric
// ApproximateAgeOfOldestMessage, which costs a CloudWatch call and lags by a
// minute or more.
func (b *Backend) Stats(ctx context.Context, params *queue.StatsParams) ([]queue.Stats, error) {
	if err := b.errIfClosed("stats"); err != nil {
		return nil, err
	}
	if params == nil {
		return nil, fmt.Errorf("sqs stats: nil params: %w", queue.ErrInvalidArgument)
	}
	stats := make([]queue.Stats, len(params.Queues))
	errs := make([]error, len(params.Queues))
	sem := make(chan struct{}, b.cfg.StatsConcurrency)
	var wg sync.WaitGroup
	for i, name := range params.Queues {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			stats[i], errs[i] = b.stats(ctx, name)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return stats, nil
}

func (b *Backend) stats(ctx context.Context, name string) (queue.Stats, error) {
	url, err := b.queueURL(ctx, name)
	if err != nil {
		return queue.Stats{}, err
	}
	cctx, cancel := b.callCtx(ctx, 0)
	defer cancel()
	out, err := b.client.GetQueueAttributes(cctx,
		&sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: statsAttributes},
		b.count(opGetQueueAttributes))
	if err != nil {
		err = b.translate(ctx, "stats", name, err)
		b.notFound(name, url, err)
		return queue.Stats{}, err
	}
	count := func(a types.QueueAttributeName) int64 {
		n, _ := strconv.ParseInt(out.Attributes[string(a)], 10, 64)
		return max(n, 0)
	}
	return queue.Stats{
		Queue:    name,
		Visible:  count(types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: count(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  count(types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
	}, nil
}

// SQS bounds on queue attributes EnsureQueues sets.
const (
	minRetention       = time.Minute
	maxRetention       = 14 * 24 * time.Hour
	maxMaxReceiveCount = 1000
)

// EnsureQueues creates each queue with CreateQueue and the attributes of its
// spec: VisibilityTimeout and MessageRetentionPeriod (rounded up to whole
// seconds), DelaySeconds 0 and ReceiveMessageWaitTimeSeconds 0 (Send and
// Receive rely on both), and a RedrivePolicy {deadLetterTargetArn,
// maxReceiveCount} whose ARN is the dead-letter queue's QueueArn (read with
// GetQueueAttributes). When a queue exists with other attributes (SQS
// answers QueueNameExists) they are set with SetQueueAttributes, which also
// removes a redrive policy the spec does not have. A queue that exists with
// the same attributes as those sent is left as it is (SQS's CreateQueue is
// idempotent), including a redrive policy the spec lacks. A dead-letter
// queue named by another spec of the call is created first, wherever it
// is in specs, since the redrive policy needs its ARN.
func (b *Backend) EnsureQueues(ctx context.Context, specs []queue.QueueSpec) error {
	if err := b.errIfClosed("ensure queues"); err != nil {
		return err
	}
	for _, spec := range dlqsFirst(specs) {
		if err := b.ensureQueue(ctx, spec.WithDefaults()); err != nil {
			return err
		}
	}
	return nil
}

// dlqsFirst orders specs so that each comes after the spec of its
// dead-letter queue when that is in specs too, keeping the given order
// otherwise. Specs whose dead-letter queues form a cycle keep theirs
// (their creation fails: none of them exists to redrive to).
func dlqsFirst(specs []queue.QueueSpec) []queue.QueueSpec {
	pending := make(map[string]int, len(specs)) // name → specs still to place
	for _, s := range specs {
		pending[s.Name]++
	}
	out := make([]queue.QueueSpec, 0, len(specs))
	placed := make([]bool, len(specs))
	for progress := true; progress; {
		progress = false
		for i, s := range specs {
			if placed[i] || (s.DeadLetterQueue != "" && s.DeadLetterQueue != s.Name && pending[s.DeadLetterQueue] > 0) {
				continue
			}
			placed[i], progress = true, true
			pending[s.Name]--
			out = append(out, s)
		}
	}
	for i, s := range specs {
		if !placed[i] {
			out = append(out, s)
		}
	}
	return out
}

func validateSpec(s queue.QueueSpec) error {
	switch {
	case s.Name == "":
		return errors.New("empty queue name")
	case s.VisibilityTimeout < 0 || s.VisibilityTimeout > queue.MaxVisibilityTimeout:
		return fmt.Errorf("visibility timeout %s outside 0 to %s", s.VisibilityTimeout, queue.MaxVisibilityTimeout)
	case s.Retention < minRetention || s.Retention > maxRetention:
		return fmt.Errorf("retention %s outside %s to %s (SQS's bounds)", s.Retention, minRetention, maxRetention)
	case s.DeadLetterQueue == s.Name:
		return errors.New("queue is its own dead-letter queue")
	case s.DeadLetterQueue != "" && (s.MaxReceiveCount < 1 || s.MaxReceiveCount > maxMaxReceiveCount):
		return fmt.Errorf("max receive count %d outside 1 to %d", s.MaxReceiveCount, maxMaxReceiveCount)
	}
	return nil
}

func (b *Backend) ensureQueue(ctx context.Context, spec queue.QueueSpec) error {
	if err := validateSpec(spec); err != nil {
		return fmt.Errorf("sqs ensure queue %q: %w: %w", spec.Name, queue.ErrInvalidArgument, err)
	}
	attrs := map[string]string{
		string(types.QueueAttributeNameVisibilityTimeout):             strconv.Itoa(int(ceilSeconds(spec.VisibilityTimeout))),
		string(types.QueueAttributeNameMessageRetentionPeriod):        strconv.Itoa(int(ceilSeconds(spec.Retention))),
		string(types.QueueAttributeNameDelaySeconds):                  "0",
		string(types.QueueAttributeNameReceiveMessageWaitTimeSeconds): "0",
	}
	if spec.DeadLetterQueue != "" {
		arn, err := b.queueARN(ctx, spec.DeadLetterQueue)
		if err != nil {
			return fmt.Errorf("sqs ensure queue %s: dead-letter queue: %w", spec.Name, err)
		}
		policy, err := json.Marshal(struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     int    `json:"maxReceiveCount"`
		}{arn, spec.MaxReceiveCount})
		if err != nil {
			return fmt.Errorf("sqs ensure queue %s: %w", spec.Name, err)
		}
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(policy)
	}

	cctx, cancel := b.callCtx(ctx, 0)
	defer cancel()
	out, err := b.client.CreateQueue(cctx, &sqs.CreateQueueInput{QueueName: aws.String(spec.Name), Attributes: attrs},
		b.count(opCreateQueue))
	if err == nil {
		b.rememberURL(spec.Name, aws.ToString(out.QueueUrl))
		return nil
	}
	if !queueNameExists(err) {
		return b.translate(ctx, "create queue", spec.Name, err)
	}

	// It exists with other attributes: set ours.
	url, err := b.queueURL(ctx, spec.Name)
	if err != nil {
		return err
	}
	if spec.DeadLetterQueue == "" {
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = ""
	}
	_, err = b.client.SetQueueAttributes(cctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: attrs},
		b.count(opSetQueueAttributes))
	if err != nil {
		err = b.translate(ctx, "set queue attributes", spec.Name, err)
		b.notFound(spec.Name, url, err)
		return err
	}
	return nil
}

func queueNameExists(err error) bool {
	var exists *types.QueueNameExists
	if errors.As(err, &exists) {
		return true
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "QueueNameExists", "QueueAlreadyExists", "AWS.SimpleQueueService.QueueNameExists":
			return true
		}
	}
	return false
}

// queueARN returns the named queue's ARN, from the cache or
// GetQueueAttributes.
func (b *Backend) queueARN(ctx context.Context, name string) (string, error) {
	b.mu.Lock()
	arn, ok := b.arns[name]
	b.mu.Unlock()
	if ok {
		return arn, nil
	}
	url, err := b.queueURL(ctx, name)
	if err != nil {
		return "", err
	}
	cctx, cancel := b.callCtx(ctx, 0)
	defer cancel()
	out, err := b.client.GetQueueAttributes(cctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	}, b.count(opGetQueueAttributes))
	if err != nil {
		err = b.translate(ctx, "get queue arn", name, err)
		b.notFound(name, url, err)
		return "", err
	}
	arn = out.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", fmt.Errorf("sqs get queue arn %s: no QueueArn in response: %w", name, queue.ErrUnavailable)
	}
	b.mu.Lock()
	b.arns[name] = arn
	b.mu.Unlock()
	return arn, nil
}
