package embeddedqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	sendOld(t, b, "q", backlog)
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

// TestReceiveSentAfterMatchesAScan drives a queue through random sends,
// head and fresh receives with bounds that move on and back, deletes,
// releases and clock steps, and checks every fresh receive (of 1 to 4
// messages) against a scan of the whole index: it must take the visible
// messages of lowest sequence number sent at or after the bound the
// search uses (the call's, or the last one's when the call's is less
// than freshRewind earlier), in that order, or none when there is none. The remembered search position (freshFrom) is what
// could go wrong; the scan remembers nothing.
func TestReceiveSentAfterMatchesAScan(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			testReceiveSentAfterMatchesAScan(t, seed)
		})
	}
}

func testReceiveSentAfterMatchesAScan(t *testing.T, seed uint64) {
	b, bun := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: 3 * time.Second})
	rng := rand.New(rand.NewPCG(seed, 2))
	var held []queue.Message
	// want returns the visible messages sent at or after after, lowest
	// sequence first, at most n.
	want := func(after int64, n int) []uint64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		q := b.queues["q"]
		now := bun.clock.Now().UnixNano()
		q.promote(now)
		var seqs []uint64
		for seq, m := range q.msgs.all() {
			if m.class == classVisible && m.sentAt >= after {
				seqs = append(seqs, seq)
			}
		}
		slices.Sort(seqs)
		return seqs[:min(n, len(seqs))]
	}
	sent := 0
	var last int64 // the bound the queue's search last used (freshFrom)
	searchBound := func(after int64) int64 {
		switch {
		case last == 0 || after <= last-int64(freshRewind):
			last = after
		case after > last:
			last = after
		}
		return last
	}
	for step := range 4000 {
		switch op := rng.IntN(20); {
		case op < 6:
			for range 1 + rng.IntN(5) {
				sendOne(t, b, "q", fmt.Sprint("m", sent), 0)
				sent++
			}
		case op < 7:
			held = append(held, receive(t, b, "q", 1+rng.IntN(10), 0)...)
		case op < 8:
			// A worker that took a job and went away: its lease runs
			// out long after the jobs around it were done, so it is
			// left alone in its part of the index (seqTable thins such
			// parts), and comes back visible there.
			receive(t, b, "q", 1, time.Duration(5+rng.IntN(60))*time.Second)
		case op < 14:
			bound := []time.Duration{500 * time.Millisecond, 2 * time.Second, 10 * time.Second, time.Hour}[rng.IntN(4)]
			after := bun.clock.Now().Add(-bound)
			n := 1 + rng.IntN(4)
			seqs := want(searchBound(after.UnixNano()), n)
			msgs, err := b.ReceiveSentAfter(t.Context(), &queue.ReceiveParams{Queue: "q", Max: n}, after)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]uint64, len(msgs))
			for i, m := range msgs {
				r, _ := parseReceipt(m.ReceiptHandle)
				got[i] = r.seq
			}
			if !slices.Equal(got, seqs) {
				t.Fatalf("step %d: fresh receive of %d (bound %s) took seqs %v, want %v", step, n, bound, got, seqs)
			}
			held = append(held, msgs...)
		case op < 18:
			// Most jobs end: delete a few held ones (refused when the
			// lease was lost meanwhile: fine).
			for range min(len(held), 1+rng.IntN(8)) {
				i := rng.IntN(len(held))
				_ = deleteOne(t, b, "q", held[i].ReceiptHandle)
				held = slices.Delete(held, i, i+1)
			}
		case op < 19 && len(held) > 0:
			i := rng.IntN(len(held))
			_ = changeOne(t, b, "q", held[i].ReceiptHandle, 0)
			held = slices.Delete(held, i, i+1)
		default:
			bun.clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
	}
}

// Bounds that cross by a little (two pollers asking "now − the staleness
// bound") do not start the search over: it stays past the backlog. One
// earlier by freshRewind does. A search under way past a backlog stops
// when the caller's context ends.
func TestReceiveSentAfterBoundsThatCross(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour})
	const backlog = 2 * freshScanStep / queue.MaxBatch * queue.MaxBatch
	sendOld(t, b, "q", backlog)
	bun.clock.Advance(time.Minute)
	cut := bun.clock.Now()
	sendOne(t, b, "q", "fresh-1", 0)
	sendOne(t, b, "q", "fresh-2", 0)

	passed := func() uint64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.queues["q"].freshPassed
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.ReceiveSentAfter(cancelled, &queue.ReceiveParams{Queue: "q", Max: 1}, cut); !errors.Is(err, context.Canceled) {
		t.Fatalf("a search past the backlog with its context ended: %v, want context.Canceled", err)
	}
	if n := passed(); n > freshScanStep {
		t.Fatalf("the search with its context ended passed over %d messages, want one step (%d) at most", n, freshScanStep)
	}

	if got, _ := receiveAfter(t, b, "q", 1, cut); !slices.Equal(got, []string{"fresh-1"}) {
		t.Fatalf("fresh receive %v, want [fresh-1]", got)
	}
	once := passed()
	if once < backlog || once > backlog+chunkLen {
		t.Fatalf("the searches passed over %d messages, want the backlog of %d once", once, backlog)
	}
	if got, _ := receiveAfter(t, b, "q", 1, cut.Add(-time.Millisecond)); !slices.Equal(got, []string{"fresh-2"}) || passed() != once {
		t.Fatalf("a bound 1ms earlier: %v, after passing over %d messages in all; want [fresh-2], and none passed over again (%d)",
			got, passed(), once)
	}
	if got, _ := receiveAfter(t, b, "q", 1, cut.Add(-freshRewind)); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("a bound freshRewind earlier: %v, want an old message (the search started over)", got)
	}
}

// sendOld stores n messages (a multiple of queue.MaxBatch) with body
// "old" in queue q, in batches sent together.
func sendOld(t *testing.T, b *Backend, q string, n int) {
	t.Helper()
	entries := make([]queue.SendEntry, queue.MaxBatch)
	for i := range entries {
		entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: []byte("old")}
	}
	sends := make([]*queue.SendParams, 0, n/queue.MaxBatch)
	for range n / queue.MaxBatch {
		sends = append(sends, &queue.SendParams{Queue: q, Entries: entries})
	}
	for len(sends) > 0 {
		k := min(len(sends), 1000)
		if _, errs := b.SendMany(t.Context(), sends[:k]); slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
			t.Fatal(errs)
		}
		sends = sends[k:]
	}
}
