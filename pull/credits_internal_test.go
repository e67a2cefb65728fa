package pull

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/worker"
)

// fakeStream is a Connect stream whose job sends block until let through:
// jobs placed meanwhile wait unsent, as behind a slow link.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   chan *workerv1.ConnectRequest
	out  chan *workerv1.ConnectResponse
	gate chan struct{} // a job send proceeds once this is closed
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Recv() (*workerv1.ConnectRequest, error) {
	select {
	case m := <-f.in:
		return m, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

func (f *fakeStream) Send(m *workerv1.ConnectResponse) error {
	if m.GetJobs() != nil {
		select {
		case <-f.gate:
		case <-f.ctx.Done():
			return f.ctx.Err()
		}
	}
	select {
	case f.out <- m:
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

// TestCreditsShrinkHandsBackUnsentJobs: when a worker lowers its credits
// (to zero, to drain), the jobs placed on it and not yet sent beyond its
// new credits go back at once, for other workers. They were sent anyway:
// the worker got more jobs than the credits it had just set, and a
// draining worker.Connect, which runs no job after its drain began, left
// them held until its stream closed (found in review).
func TestCreditsShrinkHandsBackUnsentJobs(t *testing.T) {
	t.Parallel()
	h, fs, _ := fakeSession(t, 3)
	// One job is being sent (its send blocks); two more wait unsent.
	answers := make(chan error, 3)
	handle := func(id string) {
		answers <- h.Handle(context.Background(), &worker.Job{ID: id, Lane: "std", Attempt: 1})
	}
	waitFor(t, func() bool { return h.Workers() == 1 }) // Welcome goes before the session is added
	go handle("a")
	waitFor(t, func() bool { return sendingSince(h) })
	go handle("b")
	go handle("c")
	waitFor(t, func() bool { return held(h) == 3 || len(answers) > 0 })
	if len(answers) > 0 {
		t.Fatalf("a delivery ended early: %v (held %d)", <-answers, held(h))
	}

	fs.in <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Credits{Credits: &workerv1.Credits{Credits: 0}}}
	for range 2 {
		select {
		case err := <-answers:
			if !errors.Is(err, worker.ErrReleased) {
				t.Fatalf("an unsent job's delivery ended with %v, want ErrReleased", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the unsent jobs were not handed back 10s after the worker set its credits to 0")
		}
	}
	// The job being sent reaches the worker, and no other.
	close(fs.gate)
	m := <-fs.out
	if jobs := m.GetJobs().GetJobs(); len(jobs) != 1 || jobs[0].GetJobId() != "a" {
		t.Fatalf("the worker got %v, want job a alone", m)
	}
	select {
	case m := <-fs.out:
		t.Fatalf("after credits 0 the worker got %v", m)
	case <-time.After(200 * time.Millisecond):
	}
	fs.in <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Results{Results: &workerv1.Results{Results: []*workerv1.Result{
		{Lease: m.GetJobs().GetJobs()[0].GetLease(), Outcome: workerv1.Outcome_OUTCOME_ACK},
	}}}}
	if err := <-answers; err != nil {
		t.Fatalf("the sent job's ack gave %v", err)
	}
}

// fakeSession starts a hub (no stall timeout to speak of) and a Connect
// on a fake stream granting credits on lane std, and returns them with
// the Welcome; both stop when the test ends.
func fakeSession(t *testing.T, credits uint32) (*Hub, *fakeStream, *workerv1.Welcome) {
	t.Helper()
	h := fakeHub(t)
	fs, _ := fakeConnect(t, h)
	return h, fs, sayHello(t, fs, credits)
}

// fakeHub returns a hub of lane std with no stall timeout to speak of,
// not started (no sweep); it stops when the test ends.
func fakeHub(t *testing.T) *Hub {
	t.Helper()
	h, err := New(Config{
		Authenticate: func(string) (*tenant.Worker, bool) { return &tenant.Worker{Name: "w"}, true },
		Lanes:        []string{"std"},
		Capacity:     func(int, map[string]int) {},
		StallTimeout: time.Hour, // no stall hands jobs back here
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })
	return h
}

// fakeConnect runs h.Connect on a new fake stream and returns the stream
// and Connect's result; the stream ends when the test ends.
func fakeConnect(t *testing.T, h *Hub) (*fakeStream, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer k")))
	fs := &fakeStream{ctx: ctx, in: make(chan *workerv1.ConnectRequest, 10), out: make(chan *workerv1.ConnectResponse, 10), gate: make(chan struct{})}
	connected := make(chan error, 1)
	done := make(chan struct{})
	go func() { defer close(done); connected <- h.Connect(fs) }()
	t.Cleanup(func() { cancel(); <-done })
	return fs, connected
}

// sayHello sends fs's Hello granting credits and returns the Welcome.
func sayHello(t *testing.T, fs *fakeStream, credits uint32) *workerv1.Welcome {
	t.Helper()
	fs.in <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: credits}}}
	m := <-fs.out
	if m.GetWelcome() == nil {
		t.Fatalf("want Welcome, got %v", m)
	}
	return m.GetWelcome()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// onlySession returns read(s) for the hub's one session, under both
// locks, or the zero value while the hub has not exactly one.
func onlySession[T any](h *Hub, read func(s *session) T) T {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.sessions) != 1 {
		var zero T
		return zero
	}
	s := h.sessions[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	return read(s)
}

// sendingSince reports whether the one session has a send under way.
func sendingSince(h *Hub) bool {
	return onlySession(h, func(s *session) bool { return !s.sendingSince.IsZero() })
}

// held returns the jobs the one session holds.
func held(h *Hub) int { return onlySession(h, func(s *session) int { return len(s.held) }) }

// TestUnsentLeaseRefused: an answer naming a lease that was placed but
// not yet sent (a guessed lease: leases are the session id and a count)
// is refused NOT_FOUND and changes nothing. It was taken: an ack deleted
// a job no worker had seen (found in review).
func TestUnsentLeaseRefused(t *testing.T) {
	t.Parallel()
	h, fs, welcome := fakeSession(t, 2)
	session := welcome.GetSession()
	waitFor(t, func() bool { return h.Workers() == 1 })
	answers := map[string]chan error{"a": make(chan error, 1), "b": make(chan error, 1)}
	handle := func(id string) {
		answers[id] <- h.Handle(context.Background(), &worker.Job{ID: id, Lane: "std", Attempt: 1})
	}
	go handle("a")
	waitFor(t, func() bool { return sendingSince(h) })
	go handle("b")
	waitFor(t, func() bool { return held(h) == 2 })

	guessed := session + ".2" // b's lease, never sent
	fs.in <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Results{Results: &workerv1.Results{Results: []*workerv1.Result{
		{Lease: guessed, Outcome: workerv1.Outcome_OUTCOME_ACK},
	}}}}
	// The answer is carried out before b can be sent.
	waitFor(t, func() bool { return refusalsQueued(h) > 0 || len(answers["b"]) > 0 })
	close(fs.gate)
	var got []*workerv1.Job
	refused := false
	for len(got) < 2 || !refused {
		select {
		case m := <-fs.out:
			if r := m.GetRefused(); r != nil {
				if r.GetLease() != guessed || codes.Code(r.GetCode()) != codes.NotFound {
					t.Fatalf("refused %v, want the guessed lease NOT_FOUND", r)
				}
				refused = true
				continue
			}
			got = append(got, m.GetJobs().GetJobs()...)
		case err := <-answers["b"]:
			t.Fatalf("the ack of a lease never sent was taken: b's delivery ended with %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("10s: the worker got %d of the 2 jobs, refusal seen: %v", len(got), refused)
		}
	}
	if got[1].GetJobId() != "b" || got[1].GetLease() != guessed {
		t.Fatalf("second job %v, want b with lease %s", got[1], guessed)
	}
	if held(h) != 2 || len(answers["b"]) != 0 {
		t.Fatalf("after the refusal the session holds %d jobs and b's delivery has %d answers, want 2 and none", held(h), len(answers["b"]))
	}
}

// refusalsQueued returns the refusals the one session has not sent yet.
func refusalsQueued(h *Hub) int {
	return onlySession(h, func(s *session) int { return len(s.refusals) })
}

// ackOf is a Results message acking leases.
func ackOf(leases ...string) *workerv1.ConnectRequest {
	rs := make([]*workerv1.Result, 0, len(leases))
	for _, l := range leases {
		rs = append(rs, &workerv1.Result{Lease: l, Outcome: workerv1.Outcome_OUTCOME_ACK})
	}
	return &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Results{Results: &workerv1.Results{Results: rs}}}
}

// TestGivenUpJobKeepsItsCredit: when the drainer gives up on a job the
// worker has received (its handler timeout, its shutdown, a lost queue
// lease), the worker, which is not told, runs it on: its credit stays
// taken until the worker answers it, and the answer is refused. The hub
// freed the credit at once and sent a worker with 1 credit a second job
// while the first still ran (found in review).
func TestGivenUpJobKeepsItsCredit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, fs, _ := fakeSession(t, 1)
		close(fs.gate)
		synctest.Wait() // the session is added
		ctxA, giveUpA := context.WithCancel(t.Context())
		a := make(chan error, 1)
		go func() { a <- h.Handle(ctxA, &worker.Job{ID: "a", Lane: "std", Attempt: 1}) }()
		jobA := (<-fs.out).GetJobs().GetJobs()[0]
		giveUpA()
		if err := <-a; !errors.Is(err, worker.ErrReleased) {
			t.Fatalf("a given up: %v, want ErrReleased", err)
		}

		b := make(chan error, 1)
		go func() { b <- h.Handle(t.Context(), &worker.Job{ID: "b", Lane: "std", Attempt: 1}) }()
		synctest.Wait()
		select {
		case m := <-fs.out:
			t.Fatalf("the worker with 1 credit, still running a, got %v", m)
		default:
		}

		// a's answer frees its credit: it is refused, and b is sent.
		fs.in <- ackOf(jobA.GetLease())
		var jobB *workerv1.Job
		for refused := false; !refused || jobB == nil; {
			m := <-fs.out
			switch {
			case m.GetRefused() != nil:
				if r := m.GetRefused(); r.GetLease() != jobA.GetLease() || codes.Code(r.GetCode()) != codes.NotFound {
					t.Fatalf("refused %v, want a's lease NOT_FOUND", r)
				}
				refused = true
			case len(m.GetJobs().GetJobs()) == 1 && m.GetJobs().GetJobs()[0].GetJobId() == "b":
				jobB = m.GetJobs().GetJobs()[0]
			default:
				t.Fatalf("after a's answer the worker got %v, want a's refusal and job b", m)
			}
		}
		fs.in <- ackOf(jobB.GetLease())
		if err := <-b; err != nil {
			t.Fatalf("b acked: %v", err)
		}
	})
}

// TestNewSessionWakesWaitingJobs: a job waiting for a credit is placed on
// a worker that connects meanwhile, at once. Adding a session woke no
// one: the job waited for a credit to free elsewhere, or for the sweep,
// and with no sweep it was handed back after creditWait although a
// worker with free credits was connected (found in review).
func TestNewSessionWakesWaitingJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakeHub(t) // not started: no sweep wakes the job
		handled := make(chan error, 1)
		go func() { handled <- h.Handle(t.Context(), &worker.Job{ID: "a", Lane: "std", Attempt: 1}) }()
		synctest.Wait() // the job waits for a credit

		fs, _ := fakeConnect(t, h)
		sayHello(t, fs, 1)
		close(fs.gate)
		select {
		case m := <-fs.out:
			if jobs := m.GetJobs().GetJobs(); len(jobs) != 1 || jobs[0].GetJobId() != "a" {
				t.Fatalf("the new worker got %v, want job a", m)
			}
			fs.in <- ackOf(m.GetJobs().GetJobs()[0].GetLease())
			if err := <-handled; err != nil {
				t.Fatalf("a acked: %v", err)
			}
		case err := <-handled:
			t.Fatalf("with a worker connected the waiting job ended with %v, want it placed", err)
		}
	})
}

// TestNoHello: a stream that never sends its Hello is ended after a
// while, and at once when the hub stops. It was held, with Connect's
// goroutine, for as long as the client kept its connection open, and a
// graceful stop of the server waited for it (found in review).
func TestNoHello(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := fakeHub(t)
			_, connected := fakeConnect(t, h)
			select {
			case err := <-connected:
				if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "Hello") {
					t.Fatalf("a stream with no Hello ended with %v, want DEADLINE_EXCEEDED naming the Hello", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("a stream with no Hello still held a minute on")
			}
		})
	})
	t.Run("stop", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := fakeHub(t)
			_, connected := fakeConnect(t, h)
			synctest.Wait() // Connect waits for the Hello
			_ = h.Stop(t.Context())
			synctest.Wait()
			select {
			case err := <-connected:
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("a stream with no Hello ended with %v at the hub's stop, want UNAVAILABLE", err)
				}
			default:
				t.Fatal("a stream with no Hello held after the hub stopped")
			}
		})
	})
}

// TestGivenUpUnsentJobWakesWaitingJobs: a job the drainer gives up on
// before it was sent frees its credit at once, and a job waiting for a
// credit takes it. It was freed with no wake: the waiting job waited for
// the sweep, or without one was handed back after creditWait (found in
// review).
func TestGivenUpUnsentJobWakesWaitingJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _, _ := fakeSession(t, 2) // the gate stays shut: a's send blocks
		synctest.Wait()
		handle := func(ctx context.Context, id string) <-chan error {
			done := make(chan error, 1)
			go func() { done <- h.Handle(ctx, &worker.Job{ID: id, Lane: "std", Attempt: 1}) }()
			synctest.Wait()
			return done
		}
		handle(t.Context(), "a") // being sent
		ctxB, giveUpB := context.WithCancel(t.Context())
		b := handle(ctxB, "b") // unsent
		c := handle(t.Context(), "c")
		if n := held(h); n != 2 {
			t.Fatalf("the session holds %d jobs, want a and b", n)
		}
		giveUpB()
		if err := <-b; !errors.Is(err, worker.ErrReleased) {
			t.Fatalf("b given up: %v, want ErrReleased", err)
		}
		synctest.Wait()
		select {
		case err := <-c:
			t.Fatalf("c ended with %v, want it placed in b's credit", err)
		default:
		}
		if n := held(h); n != 2 {
			t.Fatalf("after b was given up the session holds %d jobs, want a and c", n)
		}
	})
}

// TestAssignHeedsStalls: assign places no job on a session that free
// reports has no credit: one that went silent or stalled after place
// looked (a sweep may run in between; each takes the session's lock on
// its own). assign checked the credits alone, so such a job was placed
// on a worker that let a lease time out, or on a stalled one, where it
// waited unsent, not handed back, until the worker read again or its
// lease timed out (found in review).
func TestAssignHeedsStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _, _ := fakeSession(t, 2)
		synctest.Wait()
		s := onlySession(h, func(s *session) *session { return s })
		tests := []struct {
			name string
			set  func(s *session)
			want bool
		}{
			{"silent", func(s *session) { s.silent = true }, false},
			{"stalled", func(s *session) { s.stalled = true }, false},
			{"send blocked past the stall timeout", func(s *session) { s.sendingSince = time.Now().Add(-2 * time.Hour) }, false},
			{"ready", func(*session) {}, true},
		}
		for _, tt := range tests {
			s.mu.Lock()
			s.silent, s.stalled, s.sendingSince = false, false, time.Time{}
			s.held, s.unsent = map[string]*delivery{}, nil
			tt.set(s)
			s.mu.Unlock()
			d := &delivery{lane: "std", job: &workerv1.Job{JobId: tt.name}, result: make(chan error, 1)}
			if got := s.assign(d, time.Now()); got != tt.want {
				t.Errorf("%s: assign %v, want %v (free %d)", tt.name, got, tt.want, s.free("std", time.Now()))
			}
		}
	})
}

// TestLeaseRunsFromTheSend: a job's lease runs from when its send
// returns, and a job waiting to be sent, or in a send still blocked, is
// not failed: no worker has it. When the sends stay blocked past the
// stall timeout, the jobs waiting are handed back, and the leases of
// those in the blocked send, which cannot be taken back, start then.
//
// Its lease ran from its placing, so behind a send slower than the lease
// timeout (which a worker may set as low as 1s, below the stall timeout)
// a job no worker had seen failed an attempt for a lease timed out, and
// the worker was left silent; then from when its send began, so the jobs
// of a send that blocked longer than the lease timeout (a worker that
// paused reading) failed so, each, before the worker received them
// (found in review, both).
func TestLeaseRunsFromTheSend(t *testing.T) {
	// start connects a worker of 2 credits and a 1s lease, whose job
	// sends block, to a started hub of stall timeout stall, and places
	// a, whose send blocks, and b, which waits to be sent.
	start := func(t *testing.T, stall time.Duration) (fs *fakeStream, a, b <-chan error) {
		h := fakeHub(t)
		h.cfg.StallTimeout = stall
		if err := h.Start(t.Context()); err != nil { // the sweep fails leases
			t.Fatal(err)
		}
		fs, _ = fakeConnect(t, h)
		fs.in <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: 2, LeaseTimeout: durationpb.New(time.Second)}}}
		<-fs.out // Welcome
		synctest.Wait()
		return fs, handleAsync(t, h, "a", "std"), handleAsync(t, h, "b", "std")
	}
	pending := func(t *testing.T, when string, answers ...<-chan error) {
		t.Helper()
		synctest.Wait()
		for i, answer := range answers {
			select {
			case err := <-answer:
				t.Fatalf("%s, job %c ended with %v, want it still out", when, 'a'+i, err)
			default:
			}
		}
	}

	t.Run("send returns late", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fs, a, b := start(t, time.Hour)
			time.Sleep(3 * time.Second)
			pending(t, "3s into a's blocked send (1s lease)", a, b)

			close(fs.gate) // the worker reads: a and b are sent now
			synctest.Wait()
			var jobs []*workerv1.Job
			for len(fs.out) > 0 {
				jobs = append(jobs, (<-fs.out).GetJobs().GetJobs()...)
			}
			if len(jobs) != 2 || jobs[0].GetJobId() != "a" || jobs[1].GetJobId() != "b" {
				t.Fatalf("once the worker read, it got %v, want jobs a and b", jobs)
			}
			time.Sleep(500 * time.Millisecond)
			pending(t, "500ms after their sends returned", a, b)
			fs.in <- ackOf(jobs[1].GetLease())
			if err := <-b; err != nil {
				t.Fatalf("b sent and acked: %v", err)
			}
			time.Sleep(time.Second) // a is not answered
			if err := <-a; err == nil || !strings.Contains(err.Error(), "lease timed out") {
				t.Fatalf("a, sent 1.5s ago with a 1s lease: %v, want its lease timed out", err)
			}
		})
	})

	t.Run("send blocks for good", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, a, b := start(t, StallTimeoutDefault)
			time.Sleep(StallTimeoutDefault - time.Second)
			pending(t, "9s into a's blocked send (1s lease, 10s stall timeout)", a, b)

			time.Sleep(3 * time.Second) // past the stall, and a lease more
			if err := <-b; !errors.Is(err, worker.ErrReleased) {
				t.Fatalf("b, unsent behind a stalled send: %v, want ErrReleased", err)
			}
			if err := <-a; err == nil || !strings.Contains(err.Error(), "lease timed out") {
				t.Fatalf("a, blocked in its send 2s past the stall timeout: %v, want its lease timed out", err)
			}
		})
	})
}

// TestStopEndsWaitingJobs: Stop hands back at once the jobs waiting for
// a credit, as it does those its sessions hold. They waited out
// creditWait, or their ctx, first (found in review).
func TestStopEndsWaitingJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakeHub(t)
		handled := make(chan error, 1)
		go func() { handled <- h.Handle(t.Context(), &worker.Job{ID: "a", Lane: "std", Attempt: 1}) }()
		synctest.Wait() // a waits for a credit
		_ = h.Stop(t.Context())
		synctest.Wait()
		select {
		case err := <-handled:
			if !errors.Is(err, worker.ErrReleased) {
				t.Fatalf("a waiting at the stop: %v, want ErrReleased", err)
			}
		default:
			t.Fatal("a still waited for a credit after the hub stopped")
		}
	})
}

// TestGivenUpJobsCreditIsNotOffered: the credit a job the drainer gave up
// on keeps (TestGivenUpJobKeepsItsCredit) is not offered to the drainer,
// which no longer counts that job: offered, it granted a slot no worker
// could take, and the job it placed there waited out creditWait and was
// handed back, over and over while the given-up job ran.
func TestGivenUpJobsCreditIsNotOffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakeHub(t)
		var slots atomic.Int64
		h.cfg.Capacity = func(n int, _ map[string]int) { slots.Store(int64(n)) }
		fs, _ := fakeConnect(t, h)
		sayHello(t, fs, 1)
		close(fs.gate)
		synctest.Wait()
		if n := slots.Load(); n != 1 {
			t.Fatalf("with a worker of 1 credit the drainer has %d slots, want 1", n)
		}
		ctxA, giveUpA := context.WithCancel(t.Context())
		a := make(chan error, 1)
		go func() { a <- h.Handle(ctxA, &worker.Job{ID: "a", Lane: "std", Attempt: 1}) }()
		jobA := (<-fs.out).GetJobs().GetJobs()[0]
		giveUpA()
		<-a
		synctest.Wait()
		if n := slots.Load(); n != 0 {
			t.Fatalf("with the worker's 1 credit held by a job given up the drainer has %d slots, want 0", n)
		}
		fs.in <- ackOf(jobA.GetLease())
		<-fs.out // the refusal
		synctest.Wait()
		if n := slots.Load(); n != 1 {
			t.Fatalf("once the job given up was answered the drainer has %d slots, want 1", n)
		}
	})
}

// TestKeyRevokedWhileConnecting: a reload that revokes a worker's key
// after Connect authenticated it, and whose key check ran before the
// session joined the hub, leaves the session out: it is refused when it
// joins, and gets no job. It joined and took jobs until the next sweep
// (found by CI, as a flake of TestRevokedKeyGetsNoJobAfterTheReload).
func TestKeyRevokedWhileConnecting(t *testing.T) {
	t.Parallel()
	var revoked atomic.Bool
	var version atomic.Pointer[tenant.Version]
	version.Store(&tenant.Version{})
	h, err := New(Config{
		Authenticate: func(string) (*tenant.Worker, bool) { return &tenant.Worker{Name: "w"}, !revoked.Load() },
		KeysVersion:  version.Load,
		Lanes:        []string{"std"},
		Capacity:     func(int, map[string]int) {},
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })
	fs, connected := fakeConnect(t, h)
	fs.out = make(chan *workerv1.ConnectResponse) // the Welcome's send waits for the test
	fs.in <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: 1}}}
	// Connect has authenticated the key and is sending the Welcome: the
	// reload lands, and its key check runs, before the session joins.
	waitFor(t, func() bool { return len(fs.in) == 0 })
	revoked.Store(true)
	version.Store(&tenant.Version{})
	h.checkKeys()
	if m := <-fs.out; m.GetWelcome() == nil {
		t.Fatalf("want Welcome, got %v", m)
	}
	select {
	case err := <-connected:
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Connect after the revocation: %v, want PERMISSION_DENIED", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Connect still serving 5s after the revocation, with %d sessions in the hub", h.Workers())
	}
	if n := h.Workers(); n != 0 {
		t.Fatalf("%d sessions in the hub after the revocation, want 0", n)
	}
}
