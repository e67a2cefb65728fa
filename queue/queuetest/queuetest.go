// Package queuetest is the conformance suite every queue.Backend must
// pass, and the benchmarks every backend runs. It uses only whole-second
// durations (SQS takes integer seconds) and asserts order and counts, never
// wall time beyond generous upper bounds, so it runs unchanged against the
// embedded backend and against an SQS-compatible server.
package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// NewBackend returns a backend for one subtest; the suite closes it.
type NewBackend func(t *testing.T) queue.Backend

var (
	seq     atomic.Int64
	nameBad = regexp.MustCompile(`[^a-zA-Z0-9-]+`)
)

// queueName returns a name unique to this run and subtest, valid on SQS.
func queueName(t *testing.T, suffix string) string {
	base := nameBad.ReplaceAllString(t.Name(), "-")
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	return fmt.Sprintf("qt-%d-%d-%s-%s", time.Now().UnixNano()%1e6, seq.Add(1), base, suffix)
}

// env is one subtest's backend and queues.
type env struct {
	t   *testing.T
	ctx context.Context
	b   queue.Backend
}

func setup(t *testing.T, ctx context.Context, newBackend NewBackend) *env {
	t.Helper()
	b := newBackend(t)
	t.Cleanup(func() { _ = b.Close() })
	return &env{t: t, ctx: ctx, b: b}
}

// queue creates a queue with the given visibility and optional redrive.
func (e *env) queue(suffix string, visibility time.Duration, dlq string, maxReceives int) string {
	e.t.Helper()
	name := queueName(e.t, suffix)
	spec := queue.QueueSpec{Name: name, VisibilityTimeout: visibility, DeadLetterQueue: dlq, MaxReceiveCount: maxReceives}
	if err := e.b.EnsureQueues(e.ctx, []queue.QueueSpec{spec}); err != nil {
		e.t.Fatalf("create queue %s: %v", name, err)
	}
	return name
}

func (e *env) send(q string, bodies ...[]byte) []string {
	e.t.Helper()
	var ids []string
	for start := 0; start < len(bodies); start += queue.MaxBatch {
		chunk := bodies[start:min(start+queue.MaxBatch, len(bodies))]
		entries := make([]queue.SendEntry, len(chunk))
		for i, body := range chunk {
			entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: body}
		}
		res, err := e.b.Send(e.ctx, &queue.SendParams{Queue: q, Entries: entries})
		if err != nil {
			e.t.Fatalf("send: %v", err)
		}
		for _, r := range res {
			if r.Err != nil || r.MessageID == "" {
				e.t.Fatalf("send entry %s: %v", r.ID, r.Err)
			}
			ids = append(ids, r.MessageID)
		}
	}
	return ids
}

func (e *env) receive(q string, n int, wait, visibility time.Duration) []queue.Message {
	e.t.Helper()
	msgs, err := e.b.Receive(e.ctx, &queue.ReceiveParams{Queue: q, Max: n, Wait: wait, VisibilityTimeout: visibility})
	if err != nil {
		e.t.Fatalf("receive: %v", err)
	}
	return msgs
}

// receiveN receives until n messages arrived or 30 s passed.
func (e *env) receiveN(q string, n int, visibility time.Duration) []queue.Message {
	e.t.Helper()
	var out []queue.Message
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		out = append(out, e.receive(q, min(queue.MaxBatch, n-len(out)), 2*time.Second, visibility)...)
	}
	if len(out) != n {
		e.t.Fatalf("received %d messages within 30s, want %d", len(out), n)
	}
	return out
}

func (e *env) del(q string, msgs ...queue.Message) []error {
	e.t.Helper()
	handles := make([]string, len(msgs))
	for i, m := range msgs {
		handles[i] = m.ReceiptHandle
	}
	res, err := e.b.Delete(e.ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: handles})
	if err != nil {
		e.t.Fatalf("delete: %v", err)
	}
	return res
}

func (e *env) stats(q string) queue.Stats {
	e.t.Helper()
	s, err := e.b.Stats(e.ctx, &queue.StatsParams{Queues: []string{q}})
	if err != nil || len(s) != 1 {
		e.t.Fatalf("stats: %v %v", s, err)
	}
	return s[0]
}

// eventually retries cond for up to 30 s: approximate counts may lag.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// release makes received messages visible again.
func release(t *testing.T, e *env, q string, msgs []queue.Message) {
	t.Helper()
	changes := make([]queue.VisibilityChange, len(msgs))
	for i, m := range msgs {
		changes[i] = queue.VisibilityChange{ReceiptHandle: m.ReceiptHandle}
	}
	res, err := e.b.ChangeVisibility(e.ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: changes})
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	noErrs(t, res)
}

func noErrs(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

// Exercise runs the conformance suite as parallel subtests.
func Exercise(ctx context.Context, t *testing.T, newBackend NewBackend) {
	t.Helper()
	run := func(name string, f func(t *testing.T, e *env)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, setup(t, ctx, newBackend))
		})
	}

	run("ListQueues", func(t *testing.T, e *env) {
		l, ok := e.b.(queue.Lister)
		if !ok {
			t.Skip("the backend does not list its queues")
		}
		prefix := queueName(t, "ls") + "-"
		var specs []queue.QueueSpec
		for _, name := range []string{prefix + "b", prefix + "a", prefix[:len(prefix)-1] + "x"} {
			specs = append(specs, queue.QueueSpec{Name: name, VisibilityTimeout: time.Second})
		}
		if err := e.b.EnsureQueues(e.ctx, specs); err != nil {
			t.Fatal(err)
		}
		got, err := l.ListQueues(e.ctx, prefix)
		if want := []string{prefix + "a", prefix + "b"}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("ListQueues(%q) = %q, %v; want %q", prefix, got, err, want)
		}
		if err := e.b.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.ListQueues(e.ctx, prefix); !errors.Is(err, queue.ErrClosed) {
			t.Fatalf("ListQueues after Close: %v, want ErrClosed", err)
		}
	})

	run("RoundTrip", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		bodies := [][]byte{[]byte("one"), {0, 1, 2, 0xff, 0xfe}, bytes.Repeat([]byte("x"), 64*1024)}
		ids := e.send(q, bodies...)
		got := e.receiveN(q, 3, 0)
		seen := map[string]bool{}
		for _, m := range got {
			i := slices.Index(ids, m.MessageID)
			switch {
			case i < 0 || seen[m.MessageID]:
				t.Fatalf("message %s: not one of the sent ids %v, or received twice", m.MessageID, ids)
			case !bytes.Equal(m.Body, bodies[i]):
				t.Fatalf("message %s: body of %d bytes differs from the %d sent", m.MessageID, len(m.Body), len(bodies[i]))
			// At least once: over a network a receive whose response is lost
			// comes back after its lease with a higher count (the exact count
			// is asserted by VisibilityTimeout).
			case m.ReceiveCount < 1 || m.SentAt.IsZero() || m.ReceiptHandle == "":
				t.Fatalf("message %s: receive count %d, sent at %v, receipt %q", m.MessageID, m.ReceiveCount, m.SentAt, m.ReceiptHandle)
			}
			seen[m.MessageID] = true
		}
		noErrs(t, e.del(q, got...))
		if more := e.receive(q, 10, 0, 0); len(more) != 0 {
			t.Fatalf("%d messages after deleting all", len(more))
		}
	})

	// sluice sends every job with its tenant as the group (SQS's
	// MessageGroupId, which turns on fair queues on AWS): a backend must
	// take it on a standard queue and deliver the message as any other.
	run("GroupID", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		res, err := e.b.Send(e.ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{
			{ID: "a", Body: []byte("acme-1"), GroupID: "acme"},
			{ID: "b", Body: []byte("bolt-1"), GroupID: "bolt"},
			{ID: "c", Body: []byte("acme-2"), GroupID: "acme"},
		}})
		if err != nil {
			t.Fatalf("send with group ids: %v", err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("send entry %s with a group id: %v", r.ID, r.Err)
			}
		}
		got := map[string]bool{}
		for _, m := range e.receiveN(q, 3, 0) {
			got[string(m.Body)] = true
		}
		if len(got) != 3 {
			t.Fatalf("received %v, want all three messages", got)
		}
	})
	run("ReceiveMax", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		e.send(q, []byte("1"), []byte("2"), []byte("3"), []byte("4"), []byte("5"))
		var first []queue.Message
		e.eventually("a message", func() bool {
			first = e.receive(q, 2, 2*time.Second, 0)
			return len(first) > 0
		})
		if len(first) > 2 {
			t.Fatalf("receive of at most 2 returned %d", len(first))
		}
		release(t, e, q, first)
		all := e.receiveN(q, 5, 0)
		for _, m := range all {
			if slices.ContainsFunc(first, func(f queue.Message) bool { return f.MessageID == m.MessageID }) != (m.ReceiveCount == 2) {
				t.Fatalf("message %q has receive count %d", m.Body, m.ReceiveCount)
			}
		}
	})

	run("BatchLimits", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		eleven := make([]queue.SendEntry, queue.MaxBatch+1)
		for i := range eleven {
			eleven[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: []byte("x")}
		}
		if _, err := e.b.Send(e.ctx, &queue.SendParams{Queue: q, Entries: eleven}); !errors.Is(err, queue.ErrBatchTooLarge) {
			t.Fatalf("send of 11: %v, want ErrBatchTooLarge", err)
		}
		if _, err := e.b.Send(e.ctx, &queue.SendParams{Queue: q}); err == nil {
			t.Fatal("empty send accepted")
		}
		res, err := e.b.Send(e.ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{
			{ID: "big", Body: make([]byte, queue.MaxBodyBytes+1)},
			{ID: "ok", Body: []byte("fine")},
		}})
		if err != nil {
			t.Fatalf("mixed batch: %v", err)
		}
		if !errors.Is(res[0].Err, queue.ErrBodyTooLarge) || res[1].Err != nil || res[1].MessageID == "" {
			t.Fatalf("mixed batch results: %+v", res)
		}
		if _, err := e.b.Receive(e.ctx, &queue.ReceiveParams{Queue: q, Max: queue.MaxBatch + 1}); err == nil {
			t.Fatal("receive of 11 accepted")
		}
		if _, err := e.b.Receive(e.ctx, &queue.ReceiveParams{Queue: q, Max: 0}); err == nil {
			t.Fatal("receive of 0 accepted")
		}
		handles := make([]string, queue.MaxBatch+1)
		for i := range handles {
			handles[i] = "h"
		}
		if _, err := e.b.Delete(e.ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: handles}); !errors.Is(err, queue.ErrBatchTooLarge) {
			t.Fatalf("delete of 11: %v", err)
		}
		changes := make([]queue.VisibilityChange, queue.MaxBatch+1)
		for i := range changes {
			changes[i] = queue.VisibilityChange{ReceiptHandle: "h", Timeout: time.Second}
		}
		if _, err := e.b.ChangeVisibility(e.ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: changes}); !errors.Is(err, queue.ErrBatchTooLarge) {
			t.Fatalf("change visibility of 11: %v", err)
		}
		if _, err := e.b.Delete(e.ctx, &queue.DeleteParams{Queue: q}); err == nil {
			t.Fatal("empty delete accepted")
		}
		if got := e.receiveN(q, 1, 0); string(got[0].Body) != "fine" {
			t.Fatalf("got %q", got[0].Body)
		}
	})

	run("VisibilityTimeout", func(t *testing.T, e *env) {
		q := e.queue("q", time.Second, "", 0)
		e.send(q, []byte("m"))
		first := e.receiveN(q, 1, 0)
		if again := e.receive(q, 1, 0, 0); len(again) != 0 {
			t.Fatal("message visible while in flight")
		}
		second := e.receiveN(q, 1, 0) // reappears after about a second
		if second[0].MessageID != first[0].MessageID || second[0].ReceiveCount != 2 {
			t.Fatalf("redelivery %+v, want the same message with receive count 2", second[0])
		}
	})

	run("ChangeVisibility", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		e.send(q, []byte("m"))
		m := e.receiveN(q, 1, 0)[0]
		res, err := e.b.ChangeVisibility(e.ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{{ReceiptHandle: m.ReceiptHandle, Timeout: 0}}})
		if err != nil {
			t.Fatal(err)
		}
		noErrs(t, res)
		m2 := e.receiveN(q, 1, 0)[0]
		if m2.MessageID != m.MessageID {
			t.Fatal("released message not received again")
		}
		res, err = e.b.ChangeVisibility(e.ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{{ReceiptHandle: m2.ReceiptHandle, Timeout: 60 * time.Second}}})
		if err != nil {
			t.Fatal(err)
		}
		noErrs(t, res)
		if again := e.receive(q, 1, time.Second, 0); len(again) != 0 {
			t.Fatal("extended message visible")
		}
	})

	run("Delay", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		res, err := e.b.Send(e.ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "d", Body: []byte("later"), Delay: 2 * time.Second}}})
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
		if now := e.receive(q, 1, 0, 0); len(now) != 0 {
			t.Fatal("delayed message visible at once")
		}
		e.eventually("delayed count", func() bool { return e.stats(q).Delayed == 1 })
		if got := e.receiveN(q, 1, 0); string(got[0].Body) != "later" {
			t.Fatalf("got %q", got[0].Body)
		}
		if _, err := e.b.Send(e.ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "x", Body: []byte("x"), Delay: queue.MaxDelay + time.Second}}}); err == nil {
			t.Fatal("delay over the maximum accepted")
		}
	})

	run("LongPoll", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		got := make(chan []queue.Message, 1)
		start := time.Now()
		go func() {
			msgs, _ := e.b.Receive(e.ctx, &queue.ReceiveParams{Queue: q, Max: 1, Wait: 20 * time.Second})
			got <- msgs
		}()
		time.Sleep(500 * time.Millisecond)
		e.send(q, []byte("wake"))
		msgs := <-got
		if len(msgs) != 1 || time.Since(start) > 15*time.Second {
			t.Fatalf("long poll returned %d messages after %s; want the message long before the 20s wait", len(msgs), time.Since(start))
		}
	})

	run("CancelEndsWait", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		ctx, cancel := context.WithCancel(e.ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		msgs, _ := e.b.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1, Wait: 20 * time.Second})
		if len(msgs) != 0 || time.Since(start) > 15*time.Second {
			t.Fatalf("cancelled receive returned %d messages after %s", len(msgs), time.Since(start))
		}
	})

	run("RedriveToDLQ", func(t *testing.T, e *env) {
		dlq := e.queue("dlq", 30*time.Second, "", 0)
		q := e.queue("q", time.Second, dlq, 2)
		id := e.send(q, []byte("poison"))[0]
		var first queue.Message
		for want := 1; want <= 2; want++ {
			m := e.receiveN(q, 1, 0)[0]
			if m.ReceiveCount != want || m.MessageID != id {
				t.Fatalf("receive %d: id %s, receive count %d", want, m.MessageID, m.ReceiveCount)
			}
			if want == 1 {
				first = m
			}
		}
		// The third receive finds the message past its max: it is moved.
		var moved []queue.Message
		e.eventually("message in the DLQ", func() bool {
			_ = e.receive(q, 1, time.Second, 0)
			moved = e.receive(dlq, 1, 0, 0)
			return len(moved) == 1
		})
		// As on SQS: the moved message keeps its ID and its first sent-at.
		if m := moved[0]; string(m.Body) != "poison" || m.MessageID != id || m.SentAt.Sub(first.SentAt).Abs() > time.Second {
			t.Fatalf("DLQ copy: body %q, id %s, sent at %s; want poison, %s, %s", m.Body, m.MessageID, m.SentAt, id, first.SentAt)
		}
		if s := e.stats(q); s.Visible+s.InFlight+s.Delayed != 0 {
			t.Fatalf("source queue still holds it: %+v", s)
		}
	})

	// Backend.EnsureQueues: a dead-letter queue may come in the same call
	// as the queues that redrive to it, after them as well as before.
	run("DeadLetterQueueLaterInCall", func(t *testing.T, e *env) {
		dlq, q := queueName(t, "dlq"), queueName(t, "q")
		err := e.b.EnsureQueues(e.ctx, []queue.QueueSpec{
			{Name: q, VisibilityTimeout: time.Second, DeadLetterQueue: dlq, MaxReceiveCount: 1},
			{Name: dlq},
		})
		if err != nil {
			t.Fatalf("EnsureQueues with the dead-letter queue after its source: %v", err)
		}
		id := e.send(q, []byte("poison"))[0]
		e.receiveN(q, 1, 0)
		var moved []queue.Message
		e.eventually("message in the DLQ", func() bool {
			_ = e.receive(q, 1, time.Second, 0)
			moved = e.receive(dlq, 1, 0, 0)
			return len(moved) == 1
		})
		if moved[0].MessageID != id {
			t.Fatalf("DLQ holds %s, want %s", moved[0].MessageID, id)
		}
	})

	run("StaleReceiptFenced", func(t *testing.T, e *env) {
		q := e.queue("q", time.Second, "", 0)
		e.send(q, []byte("contested"))
		old := e.receiveN(q, 1, 0)[0]
		cur := e.receiveN(q, 1, 30*time.Second)[0] // after the first lease expired
		if cur.MessageID != old.MessageID {
			t.Fatal("different message")
		}
		res, err := e.b.ChangeVisibility(e.ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{{ReceiptHandle: old.ReceiptHandle, Timeout: 0}}})
		if err != nil || !errors.Is(res[0], queue.ErrReceiptInvalid) {
			t.Fatalf("stale change visibility: %v %v, want ErrReceiptInvalid", res, err)
		}
		if res := e.del(q, old); !errors.Is(res[0], queue.ErrReceiptInvalid) {
			t.Fatalf("stale delete: %v, want ErrReceiptInvalid", res[0])
		}
		// The current holder still holds it.
		if again := e.receive(q, 1, 0, 0); len(again) != 0 {
			t.Fatal("stale holder released the current holder's lease")
		}
		noErrs(t, e.del(q, cur))
	})

	// A lease handed back (visibility 0) is over: a late change with its
	// handle (a renewal that raced the hand-back) must not hide the
	// message again, or a job meant for redelivery at once would wait out
	// a whole timeout. The drainer's held-job renewal relies on it.
	run("HandedBackReceiptCannotHideAgain", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		e.send(q, []byte("handed back"))
		m := e.receiveN(q, 1, 0)[0]
		release(t, e, q, []queue.Message{m})
		res, err := e.b.ChangeVisibility(e.ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{{ReceiptHandle: m.ReceiptHandle, Timeout: time.Minute}}})
		if err != nil || !errors.Is(res[0], queue.ErrReceiptInvalid) {
			t.Fatalf("change visibility after the hand-back: %v %v, want ErrReceiptInvalid", res, err)
		}
		if again := e.receiveN(q, 1, 0); again[0].MessageID != m.MessageID {
			t.Fatal("different message")
		}
	})

	run("ConcurrentConsumersNeverShare", func(t *testing.T, e *env) {
		q := e.queue("q", 60*time.Second, "", 0)
		const n = 60
		bodies := make([][]byte, n)
		for i := range bodies {
			bodies[i] = fmt.Appendf(nil, "m%02d", i)
		}
		e.send(q, bodies...)
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					msgs, err := e.b.Receive(e.ctx, &queue.ReceiveParams{Queue: q, Max: 3, Wait: 2 * time.Second})
					if err != nil || len(msgs) == 0 {
						return
					}
					mu.Lock()
					for _, m := range msgs {
						seen[string(m.Body)]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("%d distinct messages received, want %d", len(seen), n)
		}
		for body, c := range seen {
			if c != 1 {
				t.Fatalf("%s received %d times while leased", body, c)
			}
		}
	})

	run("Stats", func(t *testing.T, e *env) {
		q := e.queue("q", 60*time.Second, "", 0)
		e.send(q, []byte("a"), []byte("b"))
		if _, err := e.b.Send(e.ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "d", Body: []byte("c"), Delay: 60 * time.Second}}}); err != nil {
			t.Fatal(err)
		}
		e.receiveN(q, 1, 0)
		e.eventually("stats 1 visible, 1 in flight, 1 delayed", func() bool {
			s := e.stats(q)
			return s.Visible == 1 && s.InFlight == 1 && s.Delayed == 1
		})
	})

	run("UnknownQueue", func(t *testing.T, e *env) {
		missing := queueName(t, "missing")
		if _, err := e.b.Send(e.ctx, &queue.SendParams{Queue: missing, Entries: []queue.SendEntry{{ID: "0", Body: []byte("x")}}}); !errors.Is(err, queue.ErrQueueNotFound) {
			t.Fatalf("send: %v, want ErrQueueNotFound", err)
		}
		if _, err := e.b.Receive(e.ctx, &queue.ReceiveParams{Queue: missing, Max: 1}); !errors.Is(err, queue.ErrQueueNotFound) {
			t.Fatalf("receive: %v, want ErrQueueNotFound", err)
		}
		// A real handle, so only the queue is wrong.
		q := e.queue("q", 30*time.Second, "", 0)
		e.send(q, []byte("x"))
		h := e.receiveN(q, 1, 0)[0].ReceiptHandle
		if _, err := e.b.Delete(e.ctx, &queue.DeleteParams{Queue: missing, ReceiptHandles: []string{h}}); !errors.Is(err, queue.ErrQueueNotFound) {
			t.Fatalf("delete: %v, want ErrQueueNotFound", err)
		}
		if _, err := e.b.ChangeVisibility(e.ctx, &queue.ChangeVisibilityParams{Queue: missing, Changes: []queue.VisibilityChange{{ReceiptHandle: h}}}); !errors.Is(err, queue.ErrQueueNotFound) {
			t.Fatalf("change visibility: %v, want ErrQueueNotFound", err)
		}
		if _, err := e.b.Stats(e.ctx, &queue.StatsParams{Queues: []string{missing}}); !errors.Is(err, queue.ErrQueueNotFound) {
			t.Fatalf("stats: %v, want ErrQueueNotFound", err)
		}
	})

	run("PerEntryReceiptErrors", func(t *testing.T, e *env) {
		q := e.queue("q", 30*time.Second, "", 0)
		e.send(q, []byte("a"), []byte("b"))
		got := e.receiveN(q, 2, 0)
		res, err := e.b.ChangeVisibility(e.ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{
			{ReceiptHandle: got[0].ReceiptHandle, Timeout: 60 * time.Second},
			{ReceiptHandle: "not-a-receipt-handle", Timeout: 60 * time.Second},
		}})
		if err != nil || len(res) != 2 || res[0] != nil || !errors.Is(res[1], queue.ErrReceiptInvalid) {
			t.Fatalf("change visibility results %v (%v), want [nil, ErrReceiptInvalid]", res, err)
		}
		res = e.del(q, queue.Message{ReceiptHandle: "not-a-receipt-handle"}, got[0], got[1])
		if len(res) != 3 || !errors.Is(res[0], queue.ErrReceiptInvalid) || res[1] != nil || res[2] != nil {
			t.Fatalf("delete results %v, want [ErrReceiptInvalid, nil, nil]", res)
		}
		e.eventually("queue empty", func() bool {
			s := e.stats(q)
			return s.Visible+s.InFlight+s.Delayed == 0
		})
	})
}

// Reopen opens the same store again; for backends that own their storage.
type Reopen func(t *testing.T, dir string) queue.Backend

// ExerciseDurability checks that what a Send acknowledged survives Close
// and reopen, that deleted messages stay deleted and that in-flight ones
// come back when their visibility timeout passes.
func ExerciseDurability(ctx context.Context, t *testing.T, open Reopen) {
	t.Helper()
	dir := t.TempDir()
	b := open(t, dir)
	t.Cleanup(func() { _ = b.Close() })
	e := &env{t: t, ctx: ctx, b: b}
	q := e.queue("durable", time.Second, "", 0)
	e.send(q, []byte("1"), []byte("2"), []byte("3"), []byte("4"))
	got := e.receiveN(q, 2, 0)
	noErrs(t, e.del(q, got[0]))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "0", Body: []byte("x")}}}); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("send after close: %v, want ErrClosed", err)
	}
	b2 := open(t, dir)
	t.Cleanup(func() { _ = b2.Close() })
	e.b = b2
	back := e.receiveN(q, 3, 30*time.Second) // two never received, one in flight at close
	var bodies []string
	for _, m := range back {
		bodies = append(bodies, string(m.Body))
		want := 1
		if string(m.Body) == string(got[1].Body) {
			want = 2 // its first receive was stored too
		}
		if m.ReceiveCount != want {
			t.Fatalf("message %q: receive count %d after reopen, want %d", m.Body, m.ReceiveCount, want)
		}
	}
	slices.Sort(bodies)
	want := []string{"1", "2", "3", "4"}
	want = slices.DeleteFunc(want, func(s string) bool { return s == string(got[0].Body) })
	if !slices.Equal(bodies, want) {
		t.Fatalf("after reopen got %v, want %v", bodies, want)
	}
}
