package pull

import (
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/worker"
)

// credits is a Credits message setting n.
func credits(n uint32) *workerv1.ConnectRequest {
	return &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Credits{Credits: &workerv1.Credits{Credits: n}}}
}

// TestPlaceRetriesWhenItsPickLosesItsCredits: a job whose chosen worker
// lowers its credits between place's look and the assign goes to another
// worker with a free credit at once. place waited instead for a credit to
// free, which nothing signalled (lowering credits wakes no one): the job
// waited for the sweep, or, with none, creditWait, and was handed back
// although the other worker had a credit free all along.
//
// The window is a few microseconds (place looks at every session before
// it assigns), so the test tries many times: before the fix it was hit in
// 10 runs of 10 (go test -run TestPlaceRetries -count=1 ./pull/), by round
// 56 at the latest.
func TestPlaceRetriesWhenItsPickLosesItsCredits(t *testing.T) {
	t.Parallel()
	// At least 100 rounds, and more for about 1s of real time (which
	// synctest's fake clock does not show): thousands, or a hundred under
	// -race (which slows the look, and so widens the window).
	budget := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(budget) })
	over := func() bool {
		select {
		case <-budget:
			return true
		default:
			return false
		}
	}
	synctest.Test(t, func(t *testing.T) {
		h := fakeHub(t) // not started: no sweep hides a missed wake
		connect := func(n uint32) *fakeStream {
			fs, _ := fakeConnect(t, h)
			sayHello(t, fs, n)
			close(fs.gate)
			synctest.Wait() // added, in connect order
			return fs
		}
		x := connect(2) // the most free credits: place picks it
		y := connect(1)
		for range 1000 {
			connect(0) // looked at between x's look and its assign
		}
		answer := func(fs *fakeStream) bool {
			select {
			case m := <-fs.out:
				fs.in <- ackOf(m.GetJobs().GetJobs()[0].GetLease())
				return true
			default:
				return false
			}
		}
		round := 0
		for ; round < 100 || !over(); round++ {
			handled := make(chan error, 1)
			x.in <- credits(0)
			go func() { handled <- h.Handle(t.Context(), &worker.Job{ID: "a", Lane: "std", Attempt: 1}) }()
			synctest.Wait()
			start := time.Now()
			if !answer(x) && !answer(y) && len(handled) == 0 {
				err := <-handled
				t.Fatalf("round %d: with worker y's credit free the job waited %v for a credit and ended with %v, want it sent to y at once",
					round, time.Since(start), err)
			}
			if err := <-handled; err != nil && !errors.Is(err, worker.ErrReleased) {
				t.Fatalf("round %d: the job ended with %v", round, err) // released: x took it back unsent
			}
			x.in <- credits(2)
			synctest.Wait()
		}
		t.Logf("%d rounds", round)
	})
}

// TestPlaceAvoidsABlockedSend: a job goes to a worker that can take it
// now, not to one whose stream is blocked in a send, where it would wait
// behind that send. place picked the session with the most free credits
// alone: a worker that had stopped reading, with more credits free than
// the others, took the job, which waited unsent until the stall timeout
// (10s) found the worker stalled and handed it back, while another
// worker had a credit free.
func TestPlaceAvoidsABlockedSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakeHub(t)
		h.cfg.StallTimeout = StallTimeoutDefault
		if err := h.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		x, _ := fakeConnect(t, h)
		sayHello(t, x, 3) // its gate stays shut: it reads no job
		y, _ := fakeConnect(t, h)
		sayHello(t, y, 1)
		close(y.gate)
		synctest.Wait()
		handle := func(id string) <-chan error { return handleAsync(t, h, id, "std") }
		handle("a") // x's send of a blocks
		time.Sleep(2 * time.Second)
		start := time.Now()
		b := handle("b")
		select {
		case m := <-y.out:
			if jobs := m.GetJobs().GetJobs(); len(jobs) != 1 || jobs[0].GetJobId() != "b" {
				t.Fatalf("y got %v, want job b", m)
			}
			y.in <- ackOf(m.GetJobs().GetJobs()[0].GetLease())
			if err := <-b; err != nil {
				t.Fatalf("b acked: %v", err)
			}
		default:
			err := <-b
			t.Fatalf("with y's credit free, b waited %v behind x's blocked send and ended with %v, want it sent to y at once",
				time.Since(start), err)
		}
	})
}

// TestPlaceKeepsSharedWorkersForTheirOtherLanes: a job goes to a worker
// serving its lane alone before one that also serves other lanes, whose
// credits those lanes may need. place chose by free credits: a std job
// took the one credit of a worker serving std and gold, beside a
// std-only worker with a credit free, and the gold job the drainer then
// granted (its slots count that worker's credit for gold) found no
// credit: it waited out creditWait and was handed back, again and again
// while the std job ran.
func TestPlaceKeepsSharedWorkersForTheirOtherLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakeHub(t)
		h.cfg.Lanes = []string{"std", "gold"}
		connect := func(lanes ...string) *fakeStream {
			fs, _ := fakeConnect(t, h)
			fs.in <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: 1, Lanes: lanes}}}
			if m := <-fs.out; m.GetWelcome() == nil {
				t.Fatalf("want Welcome, got %v", m)
			}
			close(fs.gate)
			synctest.Wait()
			return fs
		}
		both := connect("std", "gold") // first: place's ties went to it
		stdOnly := connect("std")
		handle := func(id, lane string) <-chan error { return handleAsync(t, h, id, lane) }
		handle("s", "std")
		start := time.Now()
		g := handle("g", "gold")
		select {
		case m := <-stdOnly.out:
			if jobs := m.GetJobs().GetJobs(); len(jobs) != 1 || jobs[0].GetJobId() != "s" {
				t.Fatalf("the std-only worker got %v, want job s", m)
			}
		default:
			t.Error("the std-only worker, with its credit free, got no job")
		}
		var got []string
		for len(both.out) > 0 {
			for _, j := range (<-both.out).GetJobs().GetJobs() {
				got = append(got, j.GetJobId())
			}
		}
		if !slices.Equal(got, []string{"g"}) {
			err := <-g
			t.Fatalf("the std and gold worker got jobs %v, and gold job g waited %v for a credit and ended with %v; want g sent to that worker at once",
				got, time.Since(start), err)
		}
	})
}

// TestUnsentJobMovesToAFreedCredit: a job placed, for want of another
// credit, on a worker whose stream is blocked in a send goes to another
// worker once that one frees a credit, within a sweep or two. It waited
// unsent behind the blocked send until the stall timeout (10s) handed it
// back to the drainer, while the other worker's credit stayed free.
func TestUnsentJobMovesToAFreedCredit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakeHub(t)
		h.cfg.StallTimeout = StallTimeoutDefault
		if err := h.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		handle := func(id string) <-chan error { return handleAsync(t, h, id, "std") }
		y, _ := fakeConnect(t, h)
		sayHello(t, y, 1)
		close(y.gate)
		synctest.Wait()
		handle("y1") // takes y's credit
		y1 := (<-y.out).GetJobs().GetJobs()[0]
		x, _ := fakeConnect(t, h)
		sayHello(t, x, 3) // its gate stays shut: it reads no job
		synctest.Wait()
		handle("a")      // x's send of a blocks
		b := handle("b") // y is full: b waits unsent on x
		y.in <- ackOf(y1.GetLease())
		synctest.Wait()
		start := time.Now()
		select {
		case m := <-y.out:
			if jobs := m.GetJobs().GetJobs(); len(jobs) != 1 || jobs[0].GetJobId() != "b" {
				t.Fatalf("y got %v, want job b", m)
			}
			t.Logf("b reached y %v after y's credit freed", time.Since(start))
			if waited := time.Since(start); waited > 2*sweepInterval {
				t.Errorf("b reached y %v after y's credit freed, want at most two sweeps (%v)", waited, 2*sweepInterval)
			}
			y.in <- ackOf(m.GetJobs().GetJobs()[0].GetLease())
			if err := <-b; err != nil {
				t.Fatalf("b acked: %v", err)
			}
		case err := <-b:
			t.Fatalf("with y's credit free, b waited %v unsent behind x's blocked send and ended with %v, want it sent to y",
				time.Since(start), err)
		}
	})
}

// TestUnsentJobsGoToAnotherWorker: the jobs placed on a worker and not
// yet sent when its stream ends, or when it lowers its credits below
// them, go to another worker with a free credit at once. They were handed
// back to the drainer (worker.ErrReleased), to reach that worker through
// their queue again, a receive more towards max_receive_count.
func TestUnsentJobsGoToAnotherWorker(t *testing.T) {
	for _, tt := range []struct {
		name  string
		leave func(x *session, fs *fakeStream)
	}{
		{"stream ends", func(x *session, _ *fakeStream) { x.end(nil) }},
		{"credits lowered", func(_ *session, fs *fakeStream) { fs.in <- credits(0) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := fakeHub(t) // not started: no sweep moves b (moveUnsent)
				handle := func(id string) <-chan error { return handleAsync(t, h, id, "std") }
				y, _ := fakeConnect(t, h)
				sayHello(t, y, 1)
				close(y.gate)
				synctest.Wait()
				handle("y1") // takes y's credit
				y1 := (<-y.out).GetJobs().GetJobs()[0]
				xs, _ := fakeConnect(t, h)
				sayHello(t, xs, 3) // its gate stays shut: it reads no job
				synctest.Wait()
				x := h.sessions[1]
				handle("a")      // x's send of a blocks
				b := handle("b") // y is full: b waits unsent on x
				y.in <- ackOf(y1.GetLease())
				synctest.Wait()

				tt.leave(x, xs)
				synctest.Wait()
				select {
				case m := <-y.out:
					if jobs := m.GetJobs().GetJobs(); len(jobs) != 1 || jobs[0].GetJobId() != "b" {
						t.Fatalf("y got %v, want job b", m)
					}
					y.in <- ackOf(m.GetJobs().GetJobs()[0].GetLease())
					if err := <-b; err != nil {
						t.Fatalf("b acked: %v", err)
					}
				case err := <-b:
					t.Fatalf("b, unsent, ended with %v, want it sent to y, whose credit was free", err)
				default:
					t.Fatal("b reached no worker")
				}
			})
		})
	}
}

// handleAsync hands a job of lane to h.Handle on a goroutine of the
// synctest bubble, waits until the bubble is idle, and returns the
// channel of Handle's answer.
func handleAsync(t *testing.T, h *Hub, id, lane string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- h.Handle(t.Context(), &worker.Job{ID: id, Lane: lane, Attempt: 1}) }()
	synctest.Wait()
	return done
}

// TestMovingUnsentJobsCountsASharedWorkersCreditsOnce: the sweep takes
// back from a worker whose send is blocked no more unsent jobs than the
// other workers have credits free, and a worker serving several lanes
// has its free credits counted once, not once per lane. Counted per
// lane, one free credit of a std and gold worker moved a std job and a
// gold job: one took the credit, and the other, which no worker could
// take, was placed again on the blocked worker, behind the jobs placed
// there after it (or, had that worker no credit left, handed back to
// the drainer, a trip through its queue).
func TestMovingUnsentJobsCountsASharedWorkersCreditsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fakeHub(t)
		h.cfg.Lanes = []string{"std", "gold"}
		h.cfg.StallTimeout = StallTimeoutDefault
		if err := h.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		connect := func(credits uint32) *fakeStream {
			fs, _ := fakeConnect(t, h)
			fs.in <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: credits, Lanes: []string{"std", "gold"}}}}
			if m := <-fs.out; m.GetWelcome() == nil {
				t.Fatalf("want Welcome, got %v", m)
			}
			synctest.Wait()
			return fs
		}
		w := connect(1)
		close(w.gate)
		handleAsync(t, h, "w1", "std") // takes w's credit
		w1 := (<-w.out).GetJobs().GetJobs()[0]
		connect(4) // x: its gate stays shut, it reads no job
		h.mu.Lock()
		x := h.sessions[1]
		h.mu.Unlock()
		handleAsync(t, h, "a", "std") // x's send of a blocks
		for _, j := range []struct{ id, lane string }{{"b", "std"}, {"g", "gold"}, {"c", "std"}} {
			handleAsync(t, h, j.id, j.lane) // w is full: they wait unsent on x
		}
		w.in <- ackOf(w1.GetLease()) // w's one credit frees
		time.Sleep(4 * sweepInterval)
		synctest.Wait()

		var got []string
		for len(w.out) > 0 {
			for _, j := range (<-w.out).GetJobs().GetJobs() {
				got = append(got, j.GetJobId())
			}
		}
		x.mu.Lock()
		var unsent []string
		for _, d := range x.unsent {
			unsent = append(unsent, d.job.GetJobId())
		}
		x.mu.Unlock()
		if !slices.Equal(got, []string{"b"}) || !slices.Equal(unsent, []string{"g", "c"}) {
			t.Fatalf("w, with one credit free, got jobs %v, and x's unsent jobs are %v; want b moved to w, and g and c left on x in their order",
				got, unsent)
		}
	})
}
