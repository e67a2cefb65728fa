package sqsqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
)

// rawClient is a plain SDK client on the local server, for setting up what
// the backend does not do itself and for checking what it did, with opts
// applied after the endpoint.
func rawClient(t *testing.T, opts ...func(*sqs.Options)) *sqs.Client {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(t.Context(),
		config.WithRegion(fauxqs.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		t.Fatal(err)
	}
	return sqs.NewFromConfig(cfg, append([]func(*sqs.Options){func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) }}, opts...)...)
}

func ensure(t *testing.T, b queue.Backend, specs ...queue.QueueSpec) {
	t.Helper()
	if err := b.EnsureQueues(t.Context(), specs); err != nil {
		t.Fatalf("EnsureQueues: %v", err)
	}
}

func send(t *testing.T, b queue.Backend, q string, bodies ...[]byte) []queue.SendResult {
	t.Helper()
	p := &queue.SendParams{Queue: q}
	for i, body := range bodies {
		p.Entries = append(p.Entries, queue.SendEntry{ID: strconv.Itoa(i), Body: body})
	}
	res, err := b.Send(t.Context(), p)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	for _, r := range res {
		if r.Err != nil || r.MessageID == "" {
			t.Fatalf("Send result %+v", r)
		}
	}
	return res
}

// receiveAll receives from q until n messages have come or a short wait
// returns nothing.
// receiveAll receives until it has n messages, or for 15 s. An empty
// receive is not the end: a server under load (the whole suite runs
// beside it) may answer a 1 s long poll empty while a message it just
// stored is on its way, which once failed TestBodyLimits.
func receiveAll(t *testing.T, b queue.Backend, q string, n int, vis time.Duration) []queue.Message {
	t.Helper()
	var all []queue.Message
	for deadline := time.Now().Add(15 * time.Second); len(all) < n && time.Now().Before(deadline); {
		msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: queue.MaxBatch, Wait: time.Second, VisibilityTimeout: vis})
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		all = append(all, msgs...)
	}
	return all
}

func stats(t *testing.T, b queue.Backend, q string) queue.Stats {
	t.Helper()
	st, err := b.Stats(t.Context(), &queue.StatsParams{Queues: []string{q}})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st[0]
}

func TestSendReceiveDelete(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("srd")
	ensure(t, b, queue.QueueSpec{Name: q})

	// Binary bodies, as protobuf is: NUL, invalid UTF-8, every byte value.
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	bodies := [][]byte{{0x00, 0xff, 0xfe}, all, {}}
	before := time.Now().Add(-time.Second)
	res := send(t, b, q, bodies...)

	msgs := receiveAll(t, b, q, len(bodies), 30*time.Second)
	if len(msgs) != len(bodies) {
		t.Fatalf("received %d messages, want %d", len(msgs), len(bodies))
	}
	byID := map[string][]byte{}
	for i, r := range res {
		byID[r.MessageID] = bodies[i]
	}
	var handles []string
	for _, m := range msgs {
		want, ok := byID[m.MessageID]
		if !ok {
			t.Fatalf("unexpected message id %q", m.MessageID)
		}
		if !bytes.Equal(m.Body, want) {
			t.Errorf("message %s: body %x, want %x", m.MessageID, m.Body, want)
		}
		if m.ReceiveCount != 1 {
			t.Errorf("message %s: receive count %d, want 1", m.MessageID, m.ReceiveCount)
		}
		if m.SentAt.Before(before) || m.SentAt.After(time.Now().Add(time.Second)) {
			t.Errorf("message %s: sent at %s, want about now", m.MessageID, m.SentAt)
		}
		handles = append(handles, m.ReceiptHandle)
	}
	if st := stats(t, b, q); st.Visible != 0 || st.InFlight != 3 {
		t.Errorf("stats after receive: %+v, want 0 visible, 3 in flight", st)
	}

	errs, err := b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: handles})
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for i, e := range errs {
		if e != nil {
			t.Errorf("Delete entry %d: %v", i, e)
		}
	}
	if st := stats(t, b, q); st != (queue.Stats{Queue: q}) {
		t.Errorf("stats after delete: %+v, want all zero", st)
	}
	calls := b.APICalls()
	// The leases (30 s) were fresh: Delete needed no fencing call.
	if calls[sqsqueue.OpSendMessageBatch] != 1 || calls[sqsqueue.OpChangeMessageVisibilityBatch] != 0 ||
		calls[sqsqueue.OpDeleteMessageBatch] != 1 {
		t.Errorf("API calls %v: want 1 SendMessageBatch, no ChangeMessageVisibilityBatch, 1 DeleteMessageBatch", calls)
	}
}

// TestSendBatchesConcurrentSends checks the linger: 50 concurrent
// single-entry Sends share SendMessageBatch calls.
func TestSendBatchesConcurrentSends(t *testing.T) {
	t.Parallel()
	// A linger longer than the default leaves room for goroutine start-up
	// under -race on 2 cores; batches go out as soon as they hold 10.
	b := newBackend(t, func(c *sqsqueue.Config) { c.Linger = 20 * time.Millisecond })
	q := uniqueName("batch")
	ensure(t, b, queue.QueueSpec{Name: q})

	const n = 50
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := b.Send(t.Context(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{
				{ID: "only", Body: []byte(fmt.Sprintf("job-%02d", i))},
			}})
			switch {
			case err != nil:
				errs <- err
			case len(res) != 1 || res[0].Err != nil || res[0].ID != "only" || res[0].MessageID == "":
				errs <- fmt.Errorf("result %+v", res)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	batches := b.APICalls()[sqsqueue.OpSendMessageBatch]
	t.Logf("%d concurrent Sends used %d SendMessageBatch calls", n, batches)
	if batches > 10 || batches < n/queue.MaxBatch {
		t.Errorf("%d SendMessageBatch calls for %d concurrent Sends, want %d to 10", batches, n, n/queue.MaxBatch)
	}
	msgs := receiveAll(t, b, q, n, 30*time.Second)
	seen := map[string]bool{}
	for _, m := range msgs {
		seen[string(m.Body)] = true
	}
	if len(seen) != n {
		t.Errorf("received %d distinct bodies, want %d", len(seen), n)
	}
}

// TestDeleteBatchesAndFencing checks that concurrent single-handle Deletes
// share DeleteMessageBatch calls, that a fresh lease is deleted without a
// fencing call, and that a lease this backend cannot vouch for (received
// with the queue's default visibility, or about to run out) is fenced.
func TestDeleteBatchesAndFencing(t *testing.T) {
	t.Parallel()
	b := newBackend(t, func(c *sqsqueue.Config) { c.Linger = 20 * time.Millisecond })
	q := uniqueName("acks")
	ensure(t, b, queue.QueueSpec{Name: q})
	const n = 30
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "job-%02d", i)
	}
	for i := 0; i < n; i += queue.MaxBatch {
		send(t, b, q, bodies[i:i+queue.MaxBatch]...)
	}
	msgs := receiveAll(t, b, q, n, time.Minute)
	if len(msgs) != n {
		t.Fatalf("received %d, want %d", len(msgs), n)
	}
	before := b.APICalls()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, m := range msgs {
		wg.Go(func() {
			<-start
			errs, err := b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: []string{m.ReceiptHandle}})
			if err != nil || errs[0] != nil {
				t.Errorf("delete %s: %v %v", m.Body, err, errs)
			}
		})
	}
	close(start)
	wg.Wait()
	after := b.APICalls()
	deletes := after[sqsqueue.OpDeleteMessageBatch] - before[sqsqueue.OpDeleteMessageBatch]
	fences := after[sqsqueue.OpChangeMessageVisibilityBatch] - before[sqsqueue.OpChangeMessageVisibilityBatch]
	t.Logf("%d concurrent Deletes used %d DeleteMessageBatch and %d ChangeMessageVisibilityBatch calls", n, deletes, fences)
	if deletes < n/queue.MaxBatch || deletes > n/2 || fences != 0 {
		t.Errorf("%d DeleteMessageBatch (want %d to %d) and %d fencing calls (want 0)", deletes, n/queue.MaxBatch, n/2, fences)
	}
	if st := stats(t, b, q); st.Visible+st.InFlight != 0 {
		t.Errorf("stats after deleting all: %+v", st)
	}

	// Fenced: the queue's default visibility (unknown here), and a lease
	// shorter than the time a delete may take (the call timeout, 10 s).
	send(t, b, q, []byte("default"), []byte("short"))
	var handles []string
	for _, vis := range []time.Duration{0, 5 * time.Second} {
		got, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 1, Wait: 5 * time.Second, VisibilityTimeout: vis})
		if err != nil || len(got) != 1 {
			t.Fatalf("received %d (%v), want 1", len(got), err)
		}
		handles = append(handles, got[0].ReceiptHandle)
	}
	before = b.APICalls()
	errs, err := b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: handles})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	after = b.APICalls()
	if d := after[sqsqueue.OpChangeMessageVisibilityBatch] - before[sqsqueue.OpChangeMessageVisibilityBatch]; d != 1 {
		t.Errorf("%d fencing calls for two unvouched leases, want 1", d)
	}
}

func TestSendWithoutLinger(t *testing.T) {
	t.Parallel()
	b := newBackend(t, func(c *sqsqueue.Config) { c.Linger = -1 })
	q := uniqueName("nolinger")
	ensure(t, b, queue.QueueSpec{Name: q})
	for range 3 {
		send(t, b, q, []byte("x"))
	}
	if got := b.APICalls()[sqsqueue.OpSendMessageBatch]; got != 3 {
		t.Errorf("%d SendMessageBatch calls for 3 sequential Sends without linger, want 3", got)
	}
}

// TestSendPartialFailure makes the server reject one entry of a batch: the
// queue's MaximumMessageSize (1,024, set directly) is below one body.
func TestSendPartialFailure(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	q := uniqueName("partial")
	if _, err := raw.CreateQueue(t.Context(), &sqs.CreateQueueInput{
		QueueName:  aws.String(q),
		Attributes: map[string]string{"MaximumMessageSize": "1024"},
	}); err != nil {
		t.Fatal(err)
	}
	// Config.Client: the backend uses the caller's client as it is.
	b := newBackend(t, func(c *sqsqueue.Config) { c.Client = raw })

	res, err := b.Send(t.Context(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{
		{ID: "a", Body: []byte("small")},
		{ID: "b", Body: bytes.Repeat([]byte{7}, 1000)}, // 1,336 bytes in base64
		{ID: "c", Body: []byte("small too")},
	}})
	if err != nil {
		t.Fatalf("Send: %v (a partial failure must be reported per entry)", err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results, want 3", len(res))
	}
	for _, i := range []int{0, 2} {
		if res[i].Err != nil || res[i].MessageID == "" {
			t.Errorf("entry %s: %+v, want stored", res[i].ID, res[i])
		}
	}
	if res[1].ID != "b" || res[1].MessageID != "" || !errors.Is(res[1].Err, queue.ErrInvalidArgument) {
		t.Errorf("entry b: %+v, want ErrInvalidArgument", res[1])
	}
	t.Logf("rejected entry: %v", res[1].Err)
	if got := b.APICalls()[sqsqueue.OpSendMessageBatch]; got != 1 {
		t.Errorf("%d SendMessageBatch calls, want 1", got)
	}
	if msgs := receiveAll(t, b, q, 2, 30*time.Second); len(msgs) != 2 {
		t.Errorf("received %d messages, want the 2 stored", len(msgs))
	}
}

func TestBodyLimits(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("limits")
	ensure(t, b, queue.QueueSpec{Name: q})

	largest := bytes.Repeat([]byte{0xab}, sqsqueue.MaxRawBodyBytes)
	res, err := b.Send(t.Context(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{
		{ID: "fits", Body: largest},
		{ID: "encoded-too-large", Body: make([]byte, sqsqueue.MaxRawBodyBytes+1)},
		{ID: "raw-too-large", Body: make([]byte, queue.MaxBodyBytes+1)},
	}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if res[0].Err != nil {
		t.Errorf("body of %d bytes (%d in base64): %v, want stored", len(largest), sqsqueue.MaxEncodedBodyBytes, res[0].Err)
	}
	for _, r := range res[1:] {
		if !errors.Is(r.Err, queue.ErrBodyTooLarge) || r.MessageID != "" {
			t.Errorf("entry %s: %+v, want ErrBodyTooLarge", r.ID, r)
		}
	}
	if msg := res[1].Err.Error(); !strings.Contains(msg, "base64") {
		t.Errorf("error %q should explain the base64 expansion", msg)
	}
	msgs := receiveAll(t, b, q, 1, 30*time.Second)
	if len(msgs) != 1 || !bytes.Equal(msgs[0].Body, largest) {
		t.Fatalf("received %d messages, want the largest body back intact", len(msgs))
	}
}

func TestSendSplitsBatchesBySize(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("split")
	ensure(t, b, queue.QueueSpec{Name: q})
	// Three bodies of 100,000 bytes are 133,336 each in base64: no two fit
	// in one 256 KiB SendMessageBatch.
	body := bytes.Repeat([]byte{1}, 100_000)
	send(t, b, q, body, body, body)
	if got := b.APICalls()[sqsqueue.OpSendMessageBatch]; got != 3 {
		t.Errorf("%d SendMessageBatch calls, want 3", got)
	}
}

func TestSendInvalidArguments(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("invalid")
	ensure(t, b, queue.QueueSpec{Name: q})
	eleven := make([]queue.SendEntry, queue.MaxBatch+1)
	for i := range eleven {
		eleven[i].ID = strconv.Itoa(i)
	}
	tests := []struct {
		name    string
		entries []queue.SendEntry
		want    error
	}{
		{"empty", nil, queue.ErrInvalidArgument},
		{"too many", eleven, queue.ErrBatchTooLarge},
		{"duplicate id", []queue.SendEntry{{ID: "x"}, {ID: "x"}}, queue.ErrInvalidArgument},
		{"negative delay", []queue.SendEntry{{ID: "x", Delay: -time.Second}}, queue.ErrInvalidArgument},
		{"delay too long", []queue.SendEntry{{ID: "x", Delay: queue.MaxDelay + time.Second}}, queue.ErrInvalidArgument},
	}
	for _, tt := range tests {
		_, err := b.Send(t.Context(), &queue.SendParams{Queue: q, Entries: tt.entries})
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
	if got := b.APICalls()[sqsqueue.OpSendMessageBatch]; got != 0 {
		t.Errorf("%d SendMessageBatch calls for invalid Sends, want 0", got)
	}
}

// TestRedrive: after MaxReceiveCount receives the next receive moves the
// message to the dead-letter queue (SQS does it; the backend only sets the
// RedrivePolicy). No sleeping: ChangeVisibility 0 returns it at once.
func TestRedrive(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	dlq, q := uniqueName("dlq"), uniqueName("main")
	ensure(t, b, queue.QueueSpec{Name: dlq}, queue.QueueSpec{Name: q, DeadLetterQueue: dlq, MaxReceiveCount: 2})
	send(t, b, q, []byte("poison"))

	for i := 1; i <= 2; i++ {
		msgs := receiveAll(t, b, q, 1, time.Minute)
		if len(msgs) != 1 || msgs[0].ReceiveCount != i {
			t.Fatalf("receive %d: %+v, want the message with receive count %d", i, msgs, i)
		}
		errs, err := b.ChangeVisibility(t.Context(), &queue.ChangeVisibilityParams{
			Queue:   q,
			Changes: []queue.VisibilityChange{{ReceiptHandle: msgs[0].ReceiptHandle, Timeout: 0}},
		})
		if err != nil || errs[0] != nil {
			t.Fatalf("ChangeVisibility: %v %v", err, errs)
		}
	}
	msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 10})
	if err != nil || len(msgs) != 0 {
		t.Fatalf("third receive: %v %+v, want nothing (moved to the DLQ)", err, msgs)
	}
	moved := receiveAll(t, b, dlq, 1, time.Minute)
	if len(moved) != 1 || string(moved[0].Body) != "poison" {
		t.Fatalf("DLQ: %+v, want the poison message", moved)
	}
	if st := stats(t, b, q); st.Visible+st.InFlight+st.Delayed != 0 {
		t.Errorf("source queue stats %+v, want empty", st)
	}
}

func TestVisibilityAndStaleReceipts(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("vis")
	ensure(t, b, queue.QueueSpec{Name: q})
	send(t, b, q, []byte("job"))
	change := func(h string, d time.Duration) error {
		t.Helper()
		errs, err := b.ChangeVisibility(t.Context(), &queue.ChangeVisibilityParams{
			Queue:   q,
			Changes: []queue.VisibilityChange{{ReceiptHandle: h, Timeout: d}},
		})
		if err != nil {
			t.Fatalf("ChangeVisibility: %v", err)
		}
		return errs[0]
	}

	first := receiveAll(t, b, q, 1, time.Minute)
	if len(first) != 1 {
		t.Fatalf("received %d, want 1", len(first))
	}
	if again, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 10}); err != nil || len(again) != 0 {
		t.Fatalf("receive while hidden: %v %+v, want nothing", err, again)
	}
	if err := change(first[0].ReceiptHandle, 1500*time.Millisecond); err != nil { // extends; rounded up to 2 s
		t.Fatalf("extend lease: %v", err)
	}
	if err := change(first[0].ReceiptHandle, 0); err != nil {
		t.Fatalf("release: %v", err)
	}
	second := receiveAll(t, b, q, 1, time.Minute)
	if len(second) != 1 || second[0].ReceiveCount != 2 || second[0].ReceiptHandle == first[0].ReceiptHandle {
		t.Fatalf("second receive: %+v, want the message again with a new handle and receive count 2", second)
	}

	// The first lease is lost: heartbeats on its handle are fenced.
	if err := change(first[0].ReceiptHandle, time.Minute); !errors.Is(err, queue.ErrReceiptInvalid) {
		t.Errorf("change visibility with the stale handle: %v, want ErrReceiptInvalid", err)
	}
	if err := change("not-a-receipt-handle", time.Minute); !errors.Is(err, queue.ErrReceiptInvalid) {
		t.Errorf("change visibility with a malformed handle: %v, want ErrReceiptInvalid", err)
	}
	if err := change(second[0].ReceiptHandle, time.Minute); err != nil {
		t.Errorf("change visibility with the current handle: %v", err)
	}
	// Delete is fenced: the stale handle is refused and the current lease
	// is untouched; an empty handle is refused without being sent.
	errs, err := b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: []string{first[0].ReceiptHandle, ""}})
	if err != nil || !errors.Is(errs[0], queue.ErrReceiptInvalid) || !errors.Is(errs[1], queue.ErrReceiptInvalid) {
		t.Fatalf("delete stale and empty handles: %v %v, want ErrReceiptInvalid for both", err, errs)
	}
	if st := stats(t, b, q); st.InFlight != 1 {
		t.Errorf("stats %+v: the stale delete must not have deleted the message", st)
	}
	errs, err = b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: []string{second[0].ReceiptHandle}})
	if err != nil || errs[0] != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	if err := change(second[0].ReceiptHandle, time.Minute); !errors.Is(err, queue.ErrReceiptInvalid) {
		t.Errorf("change visibility after delete: %v, want ErrReceiptInvalid", err)
	}
	calls := b.APICalls()
	// 6 ChangeVisibility calls above, and a fencing call for the stale
	// handle; the current one had just been extended by a minute, so its
	// Delete needed none.
	if calls[sqsqueue.OpChangeMessageVisibilityBatch] != 7 || calls[sqsqueue.OpDeleteMessageBatch] != 1 {
		t.Errorf("API calls %v: want 7 ChangeMessageVisibilityBatch, 1 DeleteMessageBatch", calls)
	}
}

// TestSkipDeleteFencing shows what SQS does with a stale delete unfenced:
// it succeeds, and (on the emulator) deletes nothing.
func TestSkipDeleteFencing(t *testing.T) {
	t.Parallel()
	b := newBackend(t, func(c *sqsqueue.Config) { c.SkipDeleteFencing = true })
	q := uniqueName("unfenced")
	ensure(t, b, queue.QueueSpec{Name: q})
	send(t, b, q, []byte("job"))
	first := receiveAll(t, b, q, 1, time.Minute)
	errs, err := b.ChangeVisibility(t.Context(), &queue.ChangeVisibilityParams{
		Queue:   q,
		Changes: []queue.VisibilityChange{{ReceiptHandle: first[0].ReceiptHandle}},
	})
	if err != nil || errs[0] != nil {
		t.Fatalf("release: %v %v", err, errs)
	}
	second := receiveAll(t, b, q, 1, time.Minute)
	errs, err = b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: []string{first[0].ReceiptHandle}})
	if err != nil || errs[0] != nil {
		t.Fatalf("unfenced stale delete: %v %v, want success (SQS's own behaviour)", err, errs)
	}
	errs, err = b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: []string{second[0].ReceiptHandle}})
	if err != nil || errs[0] != nil {
		t.Fatalf("delete: %v %v", err, errs)
	}
	if st := stats(t, b, q); st.InFlight+st.Visible != 0 {
		t.Errorf("stats %+v, want empty", st)
	}
	calls := b.APICalls()
	if calls[sqsqueue.OpChangeMessageVisibilityBatch] != 1 || calls[sqsqueue.OpDeleteMessageBatch] != 2 {
		t.Errorf("API calls %v: want 1 ChangeMessageVisibilityBatch (the release), 2 DeleteMessageBatch", calls)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q, empty := uniqueName("stats"), uniqueName("empty")
	ensure(t, b, queue.QueueSpec{Name: q}, queue.QueueSpec{Name: empty})
	res, err := b.Send(t.Context(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{
		{ID: "now1", Body: []byte("a")},
		{ID: "now2", Body: []byte("b")},
		{ID: "later", Body: []byte("c"), Delay: 10 * time.Minute},
	}})
	if err != nil || res[0].Err != nil || res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("Send: %v %+v", err, res)
	}
	msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 1, VisibilityTimeout: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Receive: %v %d", err, len(msgs))
	}
	st, err := b.Stats(t.Context(), &queue.StatsParams{Queues: []string{q, empty}})
	if err != nil {
		t.Fatal(err)
	}
	want := []queue.Stats{{Queue: q, Visible: 1, InFlight: 1, Delayed: 1}, {Queue: empty}}
	for i := range want {
		if st[i] != want[i] {
			t.Errorf("stats[%d] = %+v, want %+v", i, st[i], want[i])
		}
	}
	if _, err := b.Stats(t.Context(), &queue.StatsParams{Queues: []string{q, uniqueName("missing")}}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("stats of a missing queue: %v, want ErrQueueNotFound", err)
	}
}

func TestEnsureQueuesSetsAttributes(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	raw := rawClient(t)
	dlq, q := uniqueName("ens-dlq"), uniqueName("ens")
	ensure(t, b, queue.QueueSpec{Name: dlq}, queue.QueueSpec{Name: q, VisibilityTimeout: 1500 * time.Millisecond})
	attrs := func() map[string]string {
		t.Helper()
		url, err := raw.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String(q)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := raw.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
			QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes
	}
	a := attrs()
	if a["VisibilityTimeout"] != "2" || a["MessageRetentionPeriod"] != "345600" || a["RedrivePolicy"] != "" {
		t.Errorf("created with %v, want VisibilityTimeout 2 (1.5 s rounded up), retention 4 days, no redrive", a)
	}

	// The queue exists with other attributes: they are set.
	ensure(t, b, queue.QueueSpec{
		Name: q, VisibilityTimeout: 45 * time.Second, Retention: time.Hour,
		DeadLetterQueue: dlq, MaxReceiveCount: 5,
	})
	a = attrs()
	wantPolicy := `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:` + dlq + `","maxReceiveCount":5}`
	if a["VisibilityTimeout"] != "45" || a["MessageRetentionPeriod"] != "3600" || a["RedrivePolicy"] != wantPolicy {
		t.Errorf("updated to %v, want VisibilityTimeout 45, retention 3600, RedrivePolicy %s", a, wantPolicy)
	}
	if got := b.APICalls()[sqsqueue.OpSetQueueAttributes]; got != 1 {
		t.Errorf("%d SetQueueAttributes calls, want 1", got)
	}
	// Same spec again: CreateQueue is idempotent, nothing to set.
	ensure(t, b, queue.QueueSpec{
		Name: q, VisibilityTimeout: 45 * time.Second, Retention: time.Hour,
		DeadLetterQueue: dlq, MaxReceiveCount: 5,
	})
	if got := b.APICalls()[sqsqueue.OpSetQueueAttributes]; got != 1 {
		t.Errorf("%d SetQueueAttributes calls after an unchanged spec, want still 1", got)
	}

	bad := []queue.QueueSpec{
		{Name: ""},
		{Name: uniqueName("x"), DeadLetterQueue: dlq},                        // no MaxReceiveCount
		{Name: uniqueName("x"), Retention: time.Second},                      // below SQS's minimum
		{Name: uniqueName("x"), VisibilityTimeout: 13 * time.Hour},           // above the maximum
		{Name: "self", DeadLetterQueue: "self", MaxReceiveCount: 1},          // its own DLQ
		{Name: uniqueName("x"), DeadLetterQueue: dlq, MaxReceiveCount: 1001}, // above SQS's maximum
	}
	for _, s := range bad {
		if err := b.EnsureQueues(t.Context(), []queue.QueueSpec{s}); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("EnsureQueues(%+v): %v, want ErrInvalidArgument", s, err)
		}
	}
	missing := queue.QueueSpec{Name: uniqueName("x"), DeadLetterQueue: uniqueName("nodlq"), MaxReceiveCount: 3}
	if err := b.EnsureQueues(t.Context(), []queue.QueueSpec{missing}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("EnsureQueues with a missing DLQ: %v, want ErrQueueNotFound", err)
	}
}

func TestQueueNotFound(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("missing")
	ctx := t.Context()
	if _, err := b.Send(ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "1", Body: []byte("x")}}}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("Send: %v", err)
	}
	if _, err := b.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("Receive: %v", err)
	}
	if _, err := b.Delete(ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: []string{"h"}}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("Delete: %v", err)
	}
	// A configured URL that names no queue fails in the call itself.
	b2 := newBackend(t, func(c *sqsqueue.Config) {
		c.QueueURLs = map[string]string{q: "http://sqs.us-east-1.localhost/000000000000/" + q}
	})
	if _, err := b2.Send(ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "1", Body: []byte("x")}}}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("Send with a stale configured URL: %v", err)
	}
	if _, err := b2.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{
		Queue:   q,
		Changes: []queue.VisibilityChange{{ReceiptHandle: "h"}},
	}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("ChangeVisibility: %v", err)
	}
}

// TestUnavailable points the backend at a loopback port nobody listens on.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	b := newBackend(t, func(c *sqsqueue.Config) {
		c.Endpoint = dead
		c.MaxAttempts = 2
		c.MaxBackoff = 10 * time.Millisecond
	})
	_, err = b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "1", Body: []byte("x")}}})
	if !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("Send: %v, want ErrUnavailable", err)
	}
	if got := b.APICalls()[sqsqueue.OpGetQueueURL]; got != 2 {
		t.Errorf("%d GetQueueUrl attempts counted, want 2 (MaxAttempts)", got)
	}

	b2 := newBackend(t, func(c *sqsqueue.Config) {
		c.Endpoint = dead
		c.MaxAttempts = 1
		c.QueueURLs = map[string]string{"q": dead + "/000000000000/q"}
	})
	_, err = b2.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "1", Body: []byte("x")}}})
	if !errors.Is(err, queue.ErrUnavailable) {
		t.Errorf("Send with a known URL: %v, want ErrUnavailable", err)
	}
	if _, err := b2.Receive(t.Context(), &queue.ReceiveParams{Queue: "q", Max: 1}); !errors.Is(err, queue.ErrUnavailable) {
		t.Errorf("Receive: %v, want ErrUnavailable", err)
	}
}

func TestLongPollReturnsOnArrival(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("poll")
	ensure(t, b, queue.QueueSpec{Name: q})

	// On an empty queue the wait is served by the server: 1 s.
	start := time.Now()
	msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 10, Wait: time.Second})
	if err != nil || len(msgs) != 0 {
		t.Fatalf("empty receive: %v %+v", err, msgs)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("empty receive with a 1 s wait returned after %s", d)
	}

	got := make(chan []queue.Message, 1)
	start = time.Now()
	go func() {
		msgs, err := b.Receive(context.Background(), &queue.ReceiveParams{Queue: q, Max: 10, Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- msgs
	}()
	send(t, b, q, []byte("wake"))
	msgs = <-got
	if len(msgs) != 1 {
		t.Fatalf("long poll returned %d messages, want 1", len(msgs))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("long poll took %s, want it to return on arrival", d)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	b := newBackend(t, func(c *sqsqueue.Config) { c.Linger = time.Hour })
	q := uniqueName("close")
	ensure(t, b, queue.QueueSpec{Name: q})

	polled := make(chan error, 1)
	go func() {
		_, err := b.Receive(context.Background(), &queue.ReceiveParams{Queue: q, Max: 10, Wait: 20 * time.Second})
		polled <- err
	}()
	sent := make(chan error, 1)
	go func() {
		res, err := b.Send(context.Background(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "1", Body: []byte("x")}}})
		if err == nil {
			err = res[0].Err
		}
		sent <- err
	}()
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Whether the Send reached its batch before Close (then Close sent it at
	// once, despite the hour of linger) or not (ErrClosed), it returns now.
	if err := <-sent; err != nil && !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Send during Close: %v, want success or ErrClosed", err)
	}
	if err := <-polled; err != nil && !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Receive during Close: %v, want ErrClosed (or an empty result)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close and the calls it ended took %s", d)
	}

	ctx := t.Context()
	checks := map[string]error{}
	_, checks["Send"] = b.Send(ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "1"}}})
	_, checks["Receive"] = b.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1})
	_, checks["Delete"] = b.Delete(ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: []string{"h"}})
	_, checks["ChangeVisibility"] = b.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{{ReceiptHandle: "h"}}})
	_, checks["Stats"] = b.Stats(ctx, &queue.StatsParams{Queues: []string{q}})
	checks["EnsureQueues"] = b.EnsureQueues(ctx, []queue.QueueSpec{{Name: q}})
	for op, err := range checks {
		if !errors.Is(err, queue.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", op, err)
		}
	}
}

func TestCallerContextCanceled(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("cancel")
	ensure(t, b, queue.QueueSpec{Name: q})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := b.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1, Wait: 20 * time.Second})
		done <- err
	}()
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Receive with a canceled context: %v, want context.Canceled", err)
	}
}

// A caller that gives up on a receive under way gets what the call
// brings back within the grace, instead of leaving it hidden on the
// server for its visibility timeout (a drainer stopping while its long
// polls are answered): here the caller gives up as the long poll starts,
// and a message sent just after is answered and returned, for the caller
// to hand back.
func TestReceiveOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	q := uniqueName("outlive")
	ensure(t, b, queue.QueueSpec{Name: q, VisibilityTimeout: time.Minute})
	started := make(chan struct{}, 1)
	sqsqueue.SetReceiveHooks(b, 10*time.Second, func() {
		select {
		case started <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	type result struct {
		msgs []queue.Message
		err  error
	}
	done := make(chan result, 1)
	go func() {
		msgs, err := b.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: queue.MaxBatch, Wait: 20 * time.Second})
		done <- result{msgs, err}
	}()
	<-started
	cancel()
	send(t, b, q, []byte("answered after its caller gave up"))
	r := <-done
	if r.err != nil || len(r.msgs) != 1 {
		t.Fatalf("Receive whose caller gave up: %d messages, error %v; want the message sent meanwhile", len(r.msgs), r.err)
	}
	if err := queue.SetVisibility(t.Context(), b, q, []string{r.msgs[0].ReceiptHandle}, 0); err != nil {
		t.Fatalf("hand the message back: %v", err)
	}
	again, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: 1, Wait: 5 * time.Second})
	if err != nil || len(again) != 1 || again[0].MessageID != r.msgs[0].MessageID {
		t.Fatalf("receive after handing back: %d messages, error %v; want the same message", len(again), err)
	}

	// A caller that gave up before the call gets its error and starts no call.
	if _, err := b.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Receive with a context ended before the call: %v, want context.Canceled", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []sqsqueue.Config{
		{MaxAttempts: -1},
		{CallTimeout: -time.Second},
		{QueueURLs: map[string]string{"q": ""}},
	} {
		if _, err := sqsqueue.New(t.Context(), cfg); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
}
