package embeddedqueue

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/queuetest"
)

// modes are the durability modes every backend-level test runs in.
var modes = []struct {
	name string
	opts Options
}{
	{"fsync=always", Options{}},
	{"fsync=interval", Options{SyncInterval: 5 * time.Millisecond}},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			queuetest.Exercise(t.Context(), t, func(t *testing.T) queue.Backend {
				opts := m.opts
				opts.Logger = testLogger(t)
				b, err := Open(filepath.Join(t.TempDir(), "queues.db"), opts)
				if err != nil {
					t.Fatal(err)
				}
				return b
			})
		})
	}
}

func TestDurability(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			queuetest.ExerciseDurability(t.Context(), t, func(t *testing.T, dir string) queue.Backend {
				opts := m.opts
				opts.Logger = testLogger(t)
				b, err := Open(filepath.Join(dir, "queues.db"), opts)
				if err != nil {
					t.Fatal(err)
				}
				return b
			})
		})
	}
}

// TestGroupCommit sends from 64 goroutines at once and checks that the
// sends shared transactions, that is, fsyncs.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	// The writer is held on the first send until every sender's first
	// send waits behind it: left to the scheduler, a machine starved of
	// CPU ran the senders one after another (640 sends in 360 commits
	// once, beside other benchmarks; 20-30 alone).
	hold := newWriterHold()
	b, _ := setupWith(t, Options{}, knobs{beforeGroup: hold.beforeGroup})
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	before := b.CommitStats()
	var observedGroups, observedOps, largest atomic.Int64
	b.ObserveWrites(func(ops int, took time.Duration) {
		if took <= 0 {
			t.Errorf("a write of %d operations took %s", ops, took)
		}
		observedGroups.Add(1)
		observedOps.Add(int64(ops))
		if int64(ops) > largest.Load() {
			largest.Store(int64(ops)) // only the writer calls it
		}
	})
	const senders, each = 64, 10
	hold.arm()
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				_, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "0", Body: fmt.Appendf(nil, "%d-%d", g, i)}}})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	hold.held()
	waitUntil(t, "every sender's first send queued behind the held writer", func() bool { return len(b.ops) == senders-1 })
	hold.release()
	wg.Wait()
	after := b.CommitStats()
	commits, ops := after.Commits-before.Commits, after.Ops-before.Ops
	t.Logf("%d sends in %d commits (%.1f per fsync)", ops, commits, float64(ops)/float64(commits))
	if ops != senders*each {
		t.Fatalf("%d operations committed, want %d", ops, senders*each)
	}
	if observedGroups.Load() != commits || observedOps.Load() != ops {
		t.Fatalf("ObserveWrites saw %d groups of %d operations in all, want %d and %d",
			observedGroups.Load(), observedOps.Load(), commits, ops)
	}
	if largest.Load() != senders {
		t.Fatalf("the largest group held %d sends, want all %d senders' first, queued behind one write", largest.Load(), senders)
	}
	if commits >= senders*each/2 {
		t.Fatalf("%d sends took %d commits; concurrent sends should share them", senders*each, commits)
	}
	if s := stats(t, b, "q"); s.Visible != senders*each {
		t.Fatalf("%d visible, want %d", s.Visible, senders*each)
	}
}

// TestGroupKeepsLogicalErrorsApart holds the writer until three operations
// are queued, so they share one transaction, and checks that invalid
// receipts in one of them fail only their own entries.
func TestGroupKeepsLogicalErrorsApart(t *testing.T) {
	t.Parallel()
	hold := newWriterHold()
	b, _ := setupWith(t, Options{}, knobs{beforeGroup: hold.beforeGroup})
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	sendOne(t, b, "q", "held", 0)
	m := receive(t, b, "q", 1, 0)[0]
	before := b.CommitStats()

	hold.arm()
	var wg sync.WaitGroup
	var delRes []error
	wg.Go(func() { sendOne(t, b, "q", "first", 0) })
	hold.held() // the writer holds "first" and waits
	wg.Go(func() {
		var err error
		delRes, err = b.Delete(t.Context(), &queue.DeleteParams{Queue: "q", ReceiptHandles: []string{"bogus", m.ReceiptHandle, m.ReceiptHandle}})
		if err != nil {
			t.Error(err)
		}
	})
	wg.Go(func() { sendOne(t, b, "q", "third", 0) })
	waitUntil(t, "two more operations queued behind the writer", func() bool { return len(b.ops) == 2 })
	hold.release()
	wg.Wait()

	if c := b.CommitStats().Commits - before.Commits; c != 1 {
		t.Fatalf("%d commits, want the three operations in one", c)
	}
	if !errors.Is(delRes[0], queue.ErrReceiptInvalid) || delRes[1] != nil || !errors.Is(delRes[2], queue.ErrReceiptInvalid) {
		t.Fatalf("delete results %v, want [invalid, nil, invalid (already deleted)]", delRes)
	}
	if s := stats(t, b, "q"); s.Visible != 2 || s.InFlight != 0 {
		t.Fatalf("stats %+v, want the two sends visible and the held message deleted", s)
	}
}

// fillStore sends batches of 100 KiB messages to q until a send fails,
// at most tries of them, and returns how many messages were answered and
// the failure, which must be ErrUnavailable.
func fillStore(t *testing.T, b *Backend, tries int) (int, error) {
	t.Helper()
	body := bytes.Repeat([]byte("x"), 100<<10)
	stored := 0
	for range tries {
		entries := make([]queue.SendEntry, queue.MaxBatch)
		for i := range entries {
			entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: body}
		}
		if _, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: entries}); err != nil {
			if !errors.Is(err, queue.ErrUnavailable) {
				t.Fatalf("send into a full store: %v, want ErrUnavailable", err)
			}
			return stored, err
		}
		stored += queue.MaxBatch
	}
	t.Fatalf("%d messages stored without a failure", stored)
	return stored, nil
}

func TestRetention(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b,
		queue.QueueSpec{Name: "dlq", Retention: 2 * time.Hour},
		queue.QueueSpec{Name: "q", Retention: time.Hour, VisibilityTimeout: time.Minute, DeadLetterQueue: "dlq", MaxReceiveCount: 1})
	sendOne(t, b, "q", "old", 0)
	sendOne(t, b, "q", "poison", 0)
	bun.clock.Advance(50 * time.Minute)
	sendOne(t, b, "q", "young", 0)
	// Move "poison" to the DLQ: it keeps its first sent-at.
	receive(t, b, "q", 2, time.Minute) // old and poison, once each
	bun.clock.Advance(2 * time.Minute)
	if got := receive(t, b, "q", 3, 0); len(got) != 1 || string(got[0].Body) != "young" {
		t.Fatalf("third receive %v, want only young (the others redriven)", got)
	}
	if s := stats(t, b, "dlq"); s.Visible != 2 || s.OldestAge != 52*time.Minute {
		t.Fatalf("dlq %+v, want 2 visible, oldest 52m", s)
	}

	bun.clock.Advance(10 * time.Minute) // old messages 62m, young 12m
	if n, err := b.Sweep(t.Context()); err != nil || n != 0 {
		t.Fatalf("sweep deleted %d (%v), want none (young is in q, the old ones in a 2h DLQ)", n, err)
	}
	bun.clock.Advance(time.Hour) // 122m and 72m
	if n, err := b.Sweep(t.Context()); err != nil || n != 3 {
		t.Fatalf("sweep deleted %d (%v), want 3", n, err)
	}
	for _, q := range []string{"q", "dlq"} {
		if s := stats(t, b, q); s != (queue.Stats{Queue: q}) {
			t.Fatalf("%s after sweep: %+v", q, s)
		}
	}
}

// TestRetentionBackground lets the sweeper find an expired message on its
// interval, in a synctest bubble: the message stays until the first sweep
// a minute in, and is gone right after it.
func TestRetentionBackground(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, bun := setupWith(t, Options{SweepInterval: time.Minute}, knobs{})
		mustEnsure(t, b, queue.QueueSpec{Name: "q", Retention: time.Minute})
		sendOne(t, b, "q", "m", 0)
		bun.clock.Advance(2 * time.Minute)
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if n := stats(t, b, "q").Visible; n != 1 {
			t.Fatalf("%d visible before the first sweep, want 1", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := stats(t, b, "q").Visible; n != 0 {
			t.Fatalf("%d visible after the first sweep, want the expired message gone", n)
		}
	})
}

// TestRedriveKeepsIdentity checks what the DLQ copy keeps: message ID,
// body and first sent-at; its receive count starts again.
func TestRedriveKeepsIdentity(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b,
		queue.QueueSpec{Name: "dlq"},
		queue.QueueSpec{Name: "q", VisibilityTimeout: 10 * time.Second, DeadLetterQueue: "dlq", MaxReceiveCount: 2})
	id := sendOne(t, b, "q", "poison", 0)
	sentAt := bun.clock.Now()
	var last queue.Message
	for want := 1; want <= 2; want++ {
		bun.clock.Advance(11 * time.Second)
		got := receive(t, b, "q", 1, 0)
		if len(got) != 1 || got[0].ReceiveCount != want || got[0].MessageID != id {
			t.Fatalf("receive %d: %+v", want, got)
		}
		last = got[0]
	}
	bun.clock.Advance(11 * time.Second)
	if got := receive(t, b, "q", 1, 0); len(got) != 0 {
		t.Fatalf("third receive returned %+v, want it redriven", got)
	}
	if err := deleteOne(t, b, "q", last.ReceiptHandle); !errors.Is(err, queue.ErrReceiptInvalid) {
		t.Fatalf("delete with the source receipt after redrive: %v", err)
	}
	got := receive(t, b, "dlq", 1, 0)
	if len(got) != 1 {
		t.Fatal("nothing in the DLQ")
	}
	m := got[0]
	if m.MessageID != id || string(m.Body) != "poison" || m.ReceiveCount != 1 || !m.SentAt.Equal(sentAt) {
		t.Fatalf("DLQ copy %+v, want id %s, first sent-at %s, receive count 1", m, id, sentAt)
	}
}

// TestRedriveInBoundedSteps: when many messages are past their max
// receive count at once (say a drainer that received a backlog and died,
// the leases ending together), the receive that finds them redrives them
// in operations of bounded size. In one operation, their bodies all went
// into one redo log record, held in memory twice over, while the writer
// served no other call; past 4 GiB the record's length wrapped.
func TestRedriveInBoundedSteps(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b,
		queue.QueueSpec{Name: "dlq"},
		queue.QueueSpec{Name: "q", VisibilityTimeout: 10 * time.Second, DeadLetterQueue: "dlq", MaxReceiveCount: 1})
	const n, size = 200, 64 << 10
	body := bytes.Repeat([]byte("x"), size)
	for range n / queue.MaxBatch {
		entries := make([]queue.SendEntry, queue.MaxBatch)
		for i := range entries {
			entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: body}
		}
		if _, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	for range n / queue.MaxBatch {
		if got := receive(t, b, "q", queue.MaxBatch, 0); len(got) != queue.MaxBatch {
			t.Fatalf("received %d, want %d", len(got), queue.MaxBatch)
		}
	}
	bun.clock.Advance(11 * time.Second) // every lease ends: all past their max
	var groups atomic.Int64             // receives are lazy: count groups, not syncs
	b.ObserveWrites(func(int, time.Duration) { groups.Add(1) })
	if got := receive(t, b, "q", 1, 0); len(got) != 0 {
		t.Fatalf("received %d, want every message redriven", len(got))
	}
	b.ObserveWrites(nil)
	if s := stats(t, b, "dlq"); s.Visible != n {
		t.Fatalf("%d in the DLQ, want %d", s.Visible, n)
	}
	if got, want := groups.Load(), int64(n*size/redriveBytes); got < want {
		t.Fatalf("%d MiB of messages redriven in %d groups, want at least %d: at most %d MiB each",
			n*size>>20, got, want, redriveBytes>>20)
	}
}

// TestRedrivesKeepTheGroupBound: receives carry no bytes of their own
// when handed to the writer, so a group can gather many; their redrives
// must still stop once the group's record reaches maxGroupBytes, as
// sends stop the gathering, each receive redriving at least one message
// so that every one goes on.
func TestRedrivesKeepTheGroupBound(t *testing.T) {
	t.Parallel()
	hold := newWriterHold()
	b, bun := setupWith(t, Options{}, knobs{beforeGroup: hold.beforeGroup})
	mustEnsure(t, b,
		queue.QueueSpec{Name: "dlq"},
		queue.QueueSpec{Name: "q", VisibilityTimeout: 10 * time.Second, DeadLetterQueue: "dlq", MaxReceiveCount: 1})
	const receivers = 10
	n := receivers * redriveBytes / queue.MaxBodyBytes // each receive redrives its most
	body := bytes.Repeat([]byte("x"), queue.MaxBodyBytes)
	for range n / queue.MaxBatch {
		entries := make([]queue.SendEntry, queue.MaxBatch)
		for i := range entries {
			entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: body}
		}
		if _, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: entries}); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, b, "q", queue.MaxBatch, 0); len(got) != queue.MaxBatch {
			t.Fatalf("received %d, want %d", len(got), queue.MaxBatch)
		}
	}
	bun.clock.Advance(11 * time.Second) // every lease ends: all past their max
	var groups atomic.Int64             // receives are lazy: count groups, not syncs
	b.ObserveWrites(func(int, time.Duration) { groups.Add(1) })
	hold.arm()
	var wg sync.WaitGroup
	for range receivers {
		wg.Go(func() {
			if got := receive(t, b, "q", 1, 0); len(got) != 0 {
				t.Errorf("received %d, want every message redriven", len(got))
			}
		})
	}
	hold.held() // the writer holds the first receive
	waitUntil(t, "the other receives queued behind it", func() bool { return len(b.ops) == receivers-1 })
	hold.release()
	wg.Wait()
	if s := stats(t, b, "dlq"); s.Visible != int64(n) {
		t.Fatalf("%d in the DLQ, want %d", s.Visible, n)
	}
	if got, want := groups.Load(), int64(n*queue.MaxBodyBytes/maxGroupBytes+1); got < want {
		t.Fatalf("%d MiB of messages redriven by %d receives in one group in %d groups, want at least %d: at most %d MiB each",
			n*queue.MaxBodyBytes>>20, receivers, got, want, maxGroupBytes>>20)
	}
}

// TestReceiptFencing covers what the conformance suite cannot: handles
// from another queue, malformed ones, and the documented choice for an
// expired lease nobody has taken over.
func TestReceiptFencing(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "a", VisibilityTimeout: 10 * time.Second}, queue.QueueSpec{Name: "b"})
	sendOne(t, b, "a", "in a", 0)
	sendOne(t, b, "b", "in b", 0)
	ma := receive(t, b, "a", 1, 0)[0]
	mb := receive(t, b, "b", 1, 0)[0]

	for _, h := range []string{ma.ReceiptHandle, "", "not-a-handle", mb.ReceiptHandle + "x"} {
		if err := deleteOne(t, b, "b", h); !errors.Is(err, queue.ErrReceiptInvalid) {
			t.Fatalf("delete from b with %q: %v, want ErrReceiptInvalid", h, err)
		}
	}
	if s := stats(t, b, "b"); s.InFlight != 1 {
		t.Fatalf("b lost its message to a foreign handle: %+v", s)
	}

	// Expired, nobody received it since: delete works (as SQS), extend does not.
	bun.clock.Advance(11 * time.Second)
	if err := changeOne(t, b, "a", ma.ReceiptHandle, time.Minute); !errors.Is(err, queue.ErrReceiptInvalid) {
		t.Fatalf("extend an expired lease: %v, want ErrReceiptInvalid", err)
	}
	if err := deleteOne(t, b, "a", ma.ReceiptHandle); err != nil {
		t.Fatalf("delete after expiry, not received since: %v", err)
	}
	if err := deleteOne(t, b, "a", ma.ReceiptHandle); !errors.Is(err, queue.ErrReceiptInvalid) {
		t.Fatalf("second delete: %v, want ErrReceiptInvalid", err)
	}
}

// TestReceiptsSurviveReopen checks that a lease outlives a restart and
// that sequence numbers are never reused, so an old handle cannot match a
// message sent after the restart.
func TestReceiptsSurviveReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queues.db")
	clock := newFakeClock()
	reopen := func() *Backend {
		b, err := Open(path, Options{Logger: quiet, Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b := reopen()
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour})
	sendOne(t, b, "q", "one", 0)
	sendOne(t, b, "q", "two", 0)
	msgs := receive(t, b, "q", 2, 0)
	if err := deleteOne(t, b, "q", msgs[1].ReceiptHandle); err != nil { // the tail
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = reopen()
	if s := stats(t, b, "q"); s.InFlight != 1 || s.Visible != 0 {
		t.Fatalf("after reopen %+v, want the lease kept", s)
	}
	sendOne(t, b, "q", "three", 0)
	three := receive(t, b, "q", 1, 0)[0]
	if three.ReceiptHandle == msgs[1].ReceiptHandle {
		t.Fatal("a new message got a deleted message's receipt handle")
	}
	if err := deleteOne(t, b, "q", msgs[1].ReceiptHandle); !errors.Is(err, queue.ErrReceiptInvalid) {
		t.Fatalf("old handle of a deleted message: %v", err)
	}
	if err := changeOne(t, b, "q", msgs[0].ReceiptHandle, time.Minute); err != nil {
		t.Fatalf("extend a lease taken before the restart: %v", err)
	}
	if err := deleteOne(t, b, "q", msgs[0].ReceiptHandle); err != nil {
		t.Fatalf("delete with a handle from before the restart: %v", err)
	}
}

func TestStatsFollowTheClock(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: 5 * time.Second})
	sendOne(t, b, "q", "a", 0)
	bun.clock.Advance(time.Second)
	sendOne(t, b, "q", "b", 0)
	sendOne(t, b, "q", "c", 10*time.Second)
	receive(t, b, "q", 1, 0)
	steps := []struct {
		advance time.Duration
		want    queue.Stats
	}{
		{0, queue.Stats{Queue: "q", Visible: 1, InFlight: 1, Delayed: 1, OldestAge: time.Second}},
		{6 * time.Second, queue.Stats{Queue: "q", Visible: 2, Delayed: 1, OldestAge: 7 * time.Second}},
		{5 * time.Second, queue.Stats{Queue: "q", Visible: 3, OldestAge: 12 * time.Second}},
	}
	for i, s := range steps {
		bun.clock.Advance(s.advance)
		if got := stats(t, b, "q"); got != s.want {
			t.Fatalf("step %d: %+v, want %+v", i, got, s.want)
		}
	}
}

// TestLongPollWakes checks each reason a waiting receive wakes: a send, a
// release to visibility zero, a delayed message becoming visible, and
// Close.
func TestLongPollWakes(t *testing.T) {
	t.Parallel()
	b, err := Open(filepath.Join(t.TempDir(), "queues.db"), Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour})
	wait := func(what string, act func()) []queue.Message {
		t.Helper()
		got := make(chan []queue.Message, 1)
		errc := make(chan error, 1)
		go func() {
			msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: "q", Max: 1, Wait: queue.MaxWait})
			got <- msgs
			errc <- err
		}()
		waitForWaiter(t, b, "q")
		start := time.Now()
		act()
		msgs := <-got
		if err := <-errc; err != nil && what != "close" {
			t.Fatalf("%s: %v", what, err)
		} else if what == "close" && !errors.Is(err, queue.ErrClosed) {
			t.Fatalf("close: %v, want ErrClosed", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("%s woke the receive after %s", what, d)
		}
		return msgs
	}
	m := wait("send", func() { sendOne(t, b, "q", "m", 0) })
	if len(m) != 1 {
		t.Fatal("send: no message")
	}
	m = wait("release", func() {
		if err := changeOne(t, b, "q", m[0].ReceiptHandle, 0); err != nil {
			t.Fatal(err)
		}
	})
	if len(m) != 1 || m[0].ReceiveCount != 2 {
		t.Fatalf("release: %+v", m)
	}
	if m = wait("delay", func() { sendOne(t, b, "q", "later", time.Second) }); len(m) != 1 {
		t.Fatal("delay: no message")
	}
	wait("close", func() { _ = b.Close() })
}

// waitForWaiter returns once a receive is waiting on q.
func waitForWaiter(t *testing.T, b *Backend, q string) {
	t.Helper()
	waitUntil(t, "a receive waiting on "+q, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.queues[q].signal != nil
	})
}

// waitUntil polls cond every millisecond and fails t if it does not hold
// within ten seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSecondOpenRefused(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	// bbolt's flock is per open file description, so a second Open in this
	// process contends as another process would.
	start := time.Now()
	_, err := Open(bun.path, Options{Logger: quiet, LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "data directory") {
		t.Fatalf("second open: %v, want ErrInUse naming the data directory", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second open took %s", d)
	}
	t.Log(err)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2, err := Open(bun.path, Options{Logger: quiet})
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	_ = b2.Close()
}

// TestOpenErrorNamesFileOnce: a store that cannot be opened (here its
// directory is a file; read-only filesystems are tested by the reliability
// suite's disk run, which needs root) says what and where, naming the file
// once.
func TestOpenErrorNamesFileOnce(t *testing.T) {
	t.Parallel()
	notDir := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(notDir, "queues.db")
	_, err := Open(path, Options{Logger: quiet})
	if err == nil {
		t.Fatal("Open under a file: no error")
	}
	if !strings.HasPrefix(err.Error(), "open queue store: ") || strings.Count(err.Error(), path) != 1 {
		t.Fatalf("error %q: want it to start with \"open queue store: \" and name %s once", err, path)
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	b, _ := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	ctx := t.Context()
	calls := map[string]error{
		"ensure": b.EnsureQueues(ctx, []queue.QueueSpec{{Name: "other"}}),
	}
	_, calls["send"] = b.Send(ctx, &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "0"}}})
	_, calls["receive"] = b.Receive(ctx, &queue.ReceiveParams{Queue: "q", Max: 1})
	_, calls["delete"] = b.Delete(ctx, &queue.DeleteParams{Queue: "q", ReceiptHandles: []string{"x"}})
	_, calls["change"] = b.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{Queue: "q", Changes: []queue.VisibilityChange{{ReceiptHandle: "x"}}})
	_, calls["stats"] = b.Stats(ctx, &queue.StatsParams{Queues: []string{"q"}})
	_, calls["sweep"] = b.Sweep(ctx)
	for name, err := range calls {
		if !errors.Is(err, queue.ErrClosed) {
			t.Errorf("%s after close: %v, want ErrClosed", name, err)
		}
	}
}

func TestArguments(t *testing.T) {
	t.Parallel()
	b, _ := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	ctx := t.Context()
	entries := func(n int, delay time.Duration) []queue.SendEntry {
		e := make([]queue.SendEntry, n)
		for i := range e {
			e[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: []byte("x"), Delay: delay}
		}
		return e
	}
	send := func(q string, e []queue.SendEntry) error {
		_, err := b.Send(ctx, &queue.SendParams{Queue: q, Entries: e})
		return err
	}
	recv := func(p queue.ReceiveParams) error {
		_, err := b.Receive(ctx, &p)
		return err
	}
	change := func(q string, timeout time.Duration) error {
		_, err := b.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{{ReceiptHandle: "x", Timeout: timeout}}})
		return err
	}
	del := func(q string, n int) error {
		_, err := b.Delete(ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: make([]string, n)})
		return err
	}
	ensure := func(specs ...queue.QueueSpec) error { return b.EnsureQueues(ctx, specs) }
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"send 11", send("q", entries(11, 0)), queue.ErrBatchTooLarge},
		{"send 0", send("q", nil), queue.ErrInvalidArgument},
		{"send negative delay", send("q", entries(1, -time.Second)), queue.ErrInvalidArgument},
		{"send delay over max", send("q", entries(1, queue.MaxDelay+time.Second)), queue.ErrInvalidArgument},
		{"send max delay", send("q", entries(1, queue.MaxDelay)), nil},
		{"send duplicate ids", send("q", []queue.SendEntry{{ID: "a"}, {ID: "a"}}), queue.ErrInvalidArgument},
		{"send unknown queue", send("nope", entries(1, 0)), queue.ErrQueueNotFound},
		{"receive max 0", recv(queue.ReceiveParams{Queue: "q"}), queue.ErrInvalidArgument},
		{"receive max 11", recv(queue.ReceiveParams{Queue: "q", Max: 11}), queue.ErrInvalidArgument},
		{"receive wait over max", recv(queue.ReceiveParams{Queue: "q", Max: 1, Wait: queue.MaxWait + time.Second}), queue.ErrInvalidArgument},
		{"receive visibility over max", recv(queue.ReceiveParams{Queue: "q", Max: 1, VisibilityTimeout: queue.MaxVisibilityTimeout + time.Second}), queue.ErrInvalidArgument},
		{"receive unknown queue", recv(queue.ReceiveParams{Queue: "nope", Max: 1}), queue.ErrQueueNotFound},
		{"delete 11", del("q", 11), queue.ErrBatchTooLarge},
		{"delete 0", del("q", 0), queue.ErrInvalidArgument},
		{"delete unknown queue", del("nope", 1), queue.ErrQueueNotFound},
		{"change over max", change("q", queue.MaxVisibilityTimeout+time.Second), queue.ErrInvalidArgument},
		{"change negative", change("q", -time.Second), queue.ErrInvalidArgument},
		{"change unknown queue", change("nope", 0), queue.ErrQueueNotFound},
		{"ensure empty name", ensure(queue.QueueSpec{}), queue.ErrInvalidArgument},
		{"ensure missing dlq", ensure(queue.QueueSpec{Name: "x", DeadLetterQueue: "nope", MaxReceiveCount: 1}), queue.ErrQueueNotFound},
		{"ensure own dlq", ensure(queue.QueueSpec{Name: "x", DeadLetterQueue: "x", MaxReceiveCount: 1}), queue.ErrInvalidArgument},
		{"ensure dlq without max", ensure(queue.QueueSpec{Name: "x", DeadLetterQueue: "q"}), queue.ErrInvalidArgument},
		{"ensure visibility over max", ensure(queue.QueueSpec{Name: "x", VisibilityTimeout: 13 * time.Hour}), queue.ErrInvalidArgument},
		{"ensure twice, differing", ensure(queue.QueueSpec{Name: "x"}, queue.QueueSpec{Name: "x", Retention: time.Hour}), queue.ErrInvalidArgument},
		{"ensure dlq later in the call", ensure(queue.QueueSpec{Name: "y", DeadLetterQueue: "ydlq", MaxReceiveCount: 3}, queue.QueueSpec{Name: "ydlq"}), nil},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) || (tt.want == nil) != (tt.err == nil) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if _, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{"q", "nope"}}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("stats of an unknown queue: %v", err)
	}
	if _, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{"x"}}); !errors.Is(err, queue.ErrQueueNotFound) {
		t.Errorf("a refused EnsureQueues created a queue: %v", err)
	}
}

// TestEnsureQueuesIdempotent checks that the same specs again cost no
// commit and that changed attributes take effect.
func TestEnsureQueuesIdempotent(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	specs := []queue.QueueSpec{{Name: "dlq"}, {Name: "q", DeadLetterQueue: "dlq", MaxReceiveCount: 5}}
	mustEnsure(t, b, specs...)
	before := b.CommitStats()
	mustEnsure(t, b, specs...)
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: queue.VisibilityTimeoutDefault, DeadLetterQueue: "dlq", MaxReceiveCount: 5})
	if after := b.CommitStats(); after != before {
		t.Fatalf("unchanged specs committed: %+v then %+v", before, after)
	}
	sendOne(t, b, "q", "m", 0)
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: 5 * time.Second, DeadLetterQueue: "dlq", MaxReceiveCount: 5})
	receive(t, b, "q", 1, 0)
	bun.clock.Advance(6 * time.Second)
	if got := receive(t, b, "q", 1, 0); len(got) != 1 {
		t.Fatal("new visibility timeout not applied")
	}
	if s := stats(t, b, "q"); s.InFlight != 1 {
		t.Fatalf("message lost by updating its queue: %+v", s)
	}
}

func TestBodyIntegrityLarge(t *testing.T) {
	t.Parallel()
	b, _ := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	body := make([]byte, queue.MaxBodyBytes)
	for i := range body {
		body[i] = byte(i * 7)
	}
	res, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "max", Body: body}, {ID: "empty"}}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatal(err, res)
	}
	got := receive(t, b, "q", 2, 0)
	if len(got) != 2 || !bytes.Equal(got[0].Body, body) || len(got[1].Body) != 0 {
		t.Fatal("bodies changed in the store")
	}
}

// TestSendMany stores the sends of one SendMany in one commit, and fails
// the ones Send would refuse alone.
func TestSendMany(t *testing.T) {
	t.Parallel()
	entries := func(n int, prefix string) []queue.SendEntry {
		es := make([]queue.SendEntry, n)
		for i := range es {
			es[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: fmt.Appendf(nil, "%s-%d", prefix, i)}
		}
		return es
	}
	tests := []struct {
		name    string
		sends   []*queue.SendParams
		wantErr []error // per send; nil: stored
		commits int64
	}{
		{
			name:    "two queues",
			sends:   []*queue.SendParams{{Queue: "a", Entries: entries(10, "a")}, {Queue: "b", Entries: entries(10, "b")}, {Queue: "a", Entries: entries(3, "a2")}},
			wantErr: []error{nil, nil, nil},
			commits: 1,
		},
		{
			name:    "refused sends fail alone",
			sends:   []*queue.SendParams{{Queue: "a", Entries: entries(11, "x")}, {Queue: "missing", Entries: entries(1, "y")}, {Queue: "b", Entries: entries(2, "z")}},
			wantErr: []error{queue.ErrBatchTooLarge, queue.ErrQueueNotFound, nil},
			commits: 1,
		},
		{
			name:    "nothing to store",
			sends:   []*queue.SendParams{{Queue: "a"}},
			wantErr: []error{queue.ErrInvalidArgument},
			commits: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, _ := setup(t)
			mustEnsure(t, b, queue.QueueSpec{Name: "a"}, queue.QueueSpec{Name: "b"})
			before := b.CommitStats()
			results, errs := b.SendMany(t.Context(), tt.sends)
			if c := b.CommitStats().Commits - before.Commits; c != tt.commits {
				t.Errorf("%d commits, want %d", c, tt.commits)
			}
			want := map[string]int64{}
			for i, p := range tt.sends {
				if tt.wantErr[i] != nil {
					if !errors.Is(errs[i], tt.wantErr[i]) || results[i] != nil {
						t.Errorf("send %d: results %v, error %v; want %v", i, results[i], errs[i], tt.wantErr[i])
					}
					continue
				}
				if errs[i] != nil || len(results[i]) != len(p.Entries) {
					t.Fatalf("send %d: %d results for %d entries, error %v", i, len(results[i]), len(p.Entries), errs[i])
				}
				for j, r := range results[i] {
					if r.Err != nil || r.ID != p.Entries[j].ID || r.MessageID == "" {
						t.Errorf("send %d entry %d: %+v", i, j, r)
					}
				}
				want[p.Queue] += int64(len(p.Entries))
			}
			for _, q := range []string{"a", "b"} {
				if s := stats(t, b, q); s.Visible != want[q] {
					t.Errorf("queue %s: %d visible, want %d", q, s.Visible, want[q])
				}
			}
		})
	}
}

// TestMove moves received messages to another queue in one commit: each
// moved message is in its new queue (with its delay) and gone from the
// old one, also after a reopen; an entry whose receipt no longer holds
// its message is refused alone and nothing is sent for it.
func TestMove(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b, bun := setupWith(t, m.opts, knobs{})
			mustEnsure(t, b, queue.QueueSpec{Name: "from", VisibilityTimeout: time.Minute}, queue.QueueSpec{Name: "to"})
			for _, body := range []string{"one", "two", "three"} {
				sendOne(t, b, "from", body, 0)
			}
			msgs := receive(t, b, "from", 3, 0)
			if len(msgs) != 3 {
				t.Fatalf("received %d, want 3", len(msgs))
			}
			if err := deleteOne(t, b, "from", msgs[2].ReceiptHandle); err != nil {
				t.Fatal(err)
			}
			entries := []queue.MoveEntry{
				{ReceiptHandle: msgs[0].ReceiptHandle, SendEntry: queue.SendEntry{ID: "a", Body: []byte("one, moved")}},
				{ReceiptHandle: msgs[1].ReceiptHandle, SendEntry: queue.SendEntry{ID: "b", Body: []byte("two, moved"), Delay: time.Second}},
				{ReceiptHandle: msgs[2].ReceiptHandle, SendEntry: queue.SendEntry{ID: "c", Body: []byte("three, deleted")}},
			}
			res, err := b.Move(t.Context(), &queue.MoveParams{From: "from", To: "to", Entries: entries})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Err != nil || res[1].Err != nil || res[0].MessageID == "" || res[0].ID != "a" || res[1].ID != "b" {
				t.Fatalf("results %+v, want a and b moved", res)
			}
			if !errors.Is(res[2].Err, queue.ErrReceiptInvalid) || res[2].MessageID != "" {
				t.Fatalf("result of a deleted message's receipt %+v, want ErrReceiptInvalid", res[2])
			}
			check := func(b *Backend) {
				t.Helper()
				if s := stats(t, b, "from"); s.Visible+s.InFlight+s.Delayed != 0 {
					t.Fatalf("from after the move: %+v, want empty", s)
				}
				if s := stats(t, b, "to"); s.Visible != 1 || s.Delayed != 1 || s.InFlight != 0 {
					t.Fatalf("to after the move: %+v, want 1 visible and 1 delayed", s)
				}
			}
			check(b)
			if res, err := b.Move(t.Context(), &queue.MoveParams{From: "from", To: "to", Entries: entries[:1]}); err != nil {
				t.Fatal(err)
			} else if !errors.Is(res[0].Err, queue.ErrReceiptInvalid) {
				t.Fatalf("a second move of the same receipt: %+v, want ErrReceiptInvalid", res[0])
			} else if s := stats(t, b, "to"); s.Visible != 1 {
				t.Fatalf("a second move of the same receipt sent again: %+v", s)
			}
			if _, err := b.Move(t.Context(), &queue.MoveParams{From: "from", To: "nowhere", Entries: entries[:1]}); !errors.Is(err, queue.ErrQueueNotFound) {
				t.Fatalf("move to a missing queue: %v, want ErrQueueNotFound", err)
			}

			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b, err = Open(bun.path, Options{Logger: quiet, Clock: bun.clock.Now, SyncInterval: m.opts.SyncInterval})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			check(b)
			bun.clock.Advance(time.Second)
			got := map[string]bool{}
			for _, msg := range receive(t, b, "to", 10, 0) {
				got[string(msg.Body)] = true
			}
			if len(got) != 2 || !got["one, moved"] || !got["two, moved"] {
				t.Fatalf("received from to after reopen: %v", got)
			}
		})
	}
}

// TestFailedOpenClosesTheLogs: an Open that fails after it has opened
// the redo logs (here the index cannot be built from a bad state record)
// leaves no file of the store open, so a process that retries Open does
// not run out of descriptors.
func TestFailedOpenClosesTheLogs(t *testing.T) {
	t.Parallel()
	b, bun := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(bun.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(stateBucket("q")).Put(seqKey(1), []byte("short")) })
	if err = errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bun.path, Options{Logger: quiet}); err == nil || !strings.Contains(err.Error(), "bad state record") {
		t.Fatalf("open of a store with a bad state record: %v, want its error", err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, bun.path) {
			t.Errorf("descriptor %s still open on %s after the failed Open", fd.Name(), target)
		}
	}
}

// writerHold stops the writer once, before the first group it starts
// after arm, until release: operations queued meanwhile share the next
// group.
type writerHold struct {
	armed, entered, released chan struct{}
	once                     sync.Once
}

func newWriterHold() *writerHold {
	return &writerHold{armed: make(chan struct{}), entered: make(chan struct{}), released: make(chan struct{})}
}

// beforeGroup is the knob that holds the writer.
func (h *writerHold) beforeGroup() {
	select {
	case <-h.armed:
		h.once.Do(func() {
			close(h.entered)
			<-h.released
		})
	default:
	}
}

func (h *writerHold) arm()     { close(h.armed) }
func (h *writerHold) held()    { <-h.entered }
func (h *writerHold) release() { close(h.released) }
