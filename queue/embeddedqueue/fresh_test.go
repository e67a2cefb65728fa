package embeddedqueue

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// receiveAfter receives up to n messages sent at or after after and
// returns their bodies and the messages.
func receiveAfter(t *testing.T, b *Backend, q string, n int, after time.Time) ([]string, []queue.Message) {
	t.Helper()
	msgs, err := b.ReceiveSentAfter(t.Context(), &queue.ReceiveParams{Queue: q, Max: n}, after)
	if err != nil {
		t.Fatal(err)
	}
	bodies := make([]string, len(msgs))
	for i, m := range msgs {
		bodies[i] = string(m.Body)
	}
	return bodies, msgs
}

// ReceiveSentAfter takes the newer messages, in send order, past older
// ones it leaves visible; released messages come back to it, messages
// in flight are passed over, an earlier bound starts its search over,
// and a message past the max receive count is still redriven.
func TestReceiveSentAfter(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b,
		queue.QueueSpec{Name: "dlq"},
		queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour, DeadLetterQueue: "dlq", MaxReceiveCount: 2})
	old := bun.clock.Now()
	for _, body := range []string{"o1", "o2", "o3"} {
		sendOne(t, b, "q", body, 0)
	}
	bun.clock.Advance(time.Minute)
	cut := bun.clock.Now()
	for _, body := range []string{"f1", "f2", "f3"} {
		sendOne(t, b, "q", body, 0)
	}
	sendOne(t, b, "q", "f4-delayed", 10*time.Second)

	got, f12 := receiveAfter(t, b, "q", 2, cut)
	if !slices.Equal(got, []string{"f1", "f2"}) {
		t.Fatalf("first fresh receive %v, want [f1 f2]", got)
	}
	if got, _ := receiveAfter(t, b, "q", 10, cut); !slices.Equal(got, []string{"f3"}) {
		t.Fatalf("second fresh receive %v, want [f3] (f1, f2 in flight, f4 delayed)", got)
	}
	if got, _ := receiveAfter(t, b, "q", 10, cut); len(got) != 0 {
		t.Fatalf("third fresh receive %v, want none", got)
	}
	if s := stats(t, b, "q"); s.Visible != 3 || s.InFlight != 3 || s.Delayed != 1 {
		t.Fatalf("stats %+v, want the 3 old messages visible, 3 in flight, 1 delayed", s)
	}
	// The head reader still starts at the oldest.
	if head := receive(t, b, "q", 1, 0); string(head[0].Body) != "o1" {
		t.Fatalf("head receive %q, want o1", head[0].Body)
	}
	// Released, f1 is fresh again, with its receive counted.
	if err := changeOne(t, b, "q", f12[0].ReceiptHandle, 0); err != nil {
		t.Fatal(err)
	}
	bun.clock.Advance(10 * time.Second) // and f4's delay passes
	got, again := receiveAfter(t, b, "q", 10, cut)
	if !slices.Equal(got, []string{"f1", "f4-delayed"}) || again[0].ReceiveCount != 2 {
		t.Fatalf("after the release %v (receive count %d), want [f1 f4-delayed], f1 on its 2nd receive", got, again[0].ReceiveCount)
	}
	// An earlier bound starts over: o2 and o3 are visible.
	if got, _ := receiveAfter(t, b, "q", 10, old); !slices.Equal(got, []string{"o2", "o3"}) {
		t.Fatalf("with the earlier bound %v, want [o2 o3]", got)
	}
	// Past its max receive count, f1 goes to the dead-letter queue on the
	// way, as from Receive.
	if err := changeOne(t, b, "q", again[0].ReceiptHandle, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := receiveAfter(t, b, "q", 10, cut); len(got) != 0 {
		t.Fatalf("after f1's second release %v, want none", got)
	}
	if s := stats(t, b, "dlq"); s.Visible != 1 {
		t.Fatalf("dlq %+v, want f1 in it", s)
	}
	// Fresh receipts work like any other.
	if err := deleteOne(t, b, "q", f12[1].ReceiptHandle); err != nil {
		t.Fatalf("delete f2 by its fresh receipt: %v", err)
	}
}

// A search past a backlog larger than one step goes on across steps, and
// a long poll for a fresh message wakes on its send.
func TestReceiveSentAfterPastABigBacklog(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour})
	const backlog = (freshScanStep + freshScanStep/2) / queue.MaxBatch * queue.MaxBatch
	entries := make([]queue.SendEntry, queue.MaxBatch)
	for i := range entries {
		entries[i] = queue.SendEntry{ID: string(rune('a' + i)), Body: []byte("old")}
	}
	sends := make([]*queue.SendParams, 0, backlog/queue.MaxBatch)
	for range backlog / queue.MaxBatch {
		sends = append(sends, &queue.SendParams{Queue: "q", Entries: entries})
	}
	for len(sends) > 0 {
		n := min(len(sends), 1000)
		if _, errs := b.SendMany(t.Context(), sends[:n]); errs != nil && slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
			t.Fatal(errs)
		}
		sends = sends[n:]
	}
	bun.clock.Advance(time.Minute)
	cut := bun.clock.Now()
	got := make(chan []queue.Message, 1)
	go func() {
		msgs, err := b.ReceiveSentAfter(t.Context(), &queue.ReceiveParams{Queue: "q", Max: 10, Wait: queue.MaxWait}, cut)
		if err != nil {
			t.Error(err)
		}
		got <- msgs
	}()
	waitForWaiter(t, b, "q")
	sendOne(t, b, "q", "fresh", 0)
	select {
	case msgs := <-got:
		if len(msgs) != 1 || string(msgs[0].Body) != "fresh" {
			t.Fatalf("long poll got %d messages (%v), want the fresh one", len(msgs), msgs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not wake for the fresh message in 10s")
	}
	if s := stats(t, b, "q"); s.Visible != backlog {
		t.Fatalf("%d visible, want the %d old messages left where they were", s.Visible, backlog)
	}
}
