package drainer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/worker"
)

// TestStopDeadlineCountsNoAttempt stops a drainer whose one delivery is
// still running when Stop's deadline passes. The drainer cancels it: the
// worker did not fail the job, the drainer interrupted it. The job must
// come back on its queue as it was (after its visibility timeout, as Stop
// says), with no attempt counted: it used to be handled as a failed
// attempt, so it was retried with attempts+1 and, on its last attempt,
// dead-lettered by a routine shutdown.
func TestStopDeadlineCountsNoAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		maxAttempts int
		released    bool // the handler answers a cancel as the pull hub does
	}{
		{"last attempt", 1, false},
		{"attempts left", 5, false},
		{"pull hub", 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, oneLane)
			q := tb.topo.ShardQueue("std", 0)
			tb.enqueue(t, q, testEnvelope("t", "interrupted", time.Now()))
			h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
			handler := Handler(h)
			if tt.released {
				handler = HandlerFunc(func(ctx context.Context, j *Job) error {
					if err := h.Handle(ctx, j); err != nil {
						return worker.ErrReleased
					}
					return nil
				})
			}
			d, err := New(Config{
				Backend: tb.backend, Topology: tb.topo, Handler: handler, Concurrency: 1, Logger: quietLog,
				PollWait: 100 * time.Millisecond,
				Policy:   sideliner.Policy{MaxAttempts: tt.maxAttempts},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			<-h.started
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := d.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Stop = %v, want the deadline passed with a delivery running", err)
			}
			c := d.Counts()
			if c.DeadLettered != 0 || c.Retried != 0 || c.Released != 0 {
				t.Errorf("counts %+v: a delivery the drainer cancelled at stop was counted as a failed attempt", c)
			}
			if dl := deadLetters(t, tb); len(dl) != 0 {
				t.Errorf("DLQ holds %d job(s) after a shutdown: %v", len(dl), dl)
			}
			if s := stats(t, tb, q); s.Visible+s.InFlight+s.Delayed != 1 {
				t.Errorf("shard queue after stop: %+v, want the one job still on it", s)
			}
		})
	}
}

// TestHandedBackHeldJobsKeepTheirReceives: a job read ahead and handed
// back unstarted, again and again (a pull lane whose only worker keeps
// reconnecting; drainers restarted one after another), must not reach the
// backend's redrive limit: it never had an attempt. Handed back with
// visibility 0 each time, its receive count grew to max_receive_count and
// the backend moved it to the DLQ on the next receive, undelivered. On its
// last receive before the limit it is now requeued (a fresh copy, receive
// count zero) instead.
func TestHandedBackHeldJobsKeepTheirReceives(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane) // max_receive_count: 3
	q := tb.topo.ShardQueue("std", 0)
	tb.enqueue(t, q, testEnvelope("t", "busy", time.Now()))
	h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: h, Concurrency: 1})
	releaseOnce := sync.OnceFunc(func() { close(h.release) })
	t.Cleanup(releaseOnce) // before the drainer's Stop
	<-h.started            // the one slot is busy from now on
	tb.enqueue(t, q, testEnvelope("t", "waiting", time.Now()))
	for round := range 5 {
		waitFor(t, func() bool { return d.Held() == 1 || len(deadLetters(t, tb)) > 0 })
		if dl := deadLetters(t, tb); len(dl) != 0 {
			t.Fatalf("round %d: DLQ holds %v: a job never attempted was redriven", round, dl)
		}
		d.SetCapacity(0, nil) // the lane closes: the held job is handed back
		waitFor(t, func() bool { return d.Held() == 0 && stats(t, tb, q).Visible == 1 })
		if dl := deadLetters(t, tb); len(dl) != 0 {
			t.Fatalf("round %d: DLQ holds %v: a job never attempted was redriven", round, dl)
		}
		d.SetCapacity(1, nil) // and opens again
	}
	releaseOnce()
	waitFor(t, func() bool { return d.Counts().Delivered == 2 })
	if dl := deadLetters(t, tb); len(dl) != 0 {
		t.Fatalf("DLQ holds %v after both jobs were delivered", dl)
	}
}

// handBackHangs is a backend whose hand-backs (visibility changes to 0)
// hang until their context ends, as calls to an unreachable backend do.
type handBackHangs struct{ queue.Backend }

func (b handBackHangs) ChangeVisibility(ctx context.Context, p *queue.ChangeVisibilityParams) ([]error, error) {
	if len(p.Changes) > 0 && p.Changes[0].Timeout == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.Backend.ChangeVisibility(ctx, p)
}

// TestStopIsBoundedByItsContext: Stop hands back the jobs held, but no
// longer than its context allows, however the backend answers. The
// hand-back had a 30s deadline of its own: with the backend unreachable at
// shutdown, Stop with a 1s context took 30s, past any shutdown grace.
func TestStopIsBoundedByItsContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tb := setup(t, "lanes:\n  - {name: std, shards: 1, visibility_timeout: 3s}\n")
		q := tb.topo.ShardQueue("std", 0)
		tb.enqueue(t, q, testEnvelope("t", "a", time.Now()), testEnvelope("t", "b", time.Now()))
		h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
		d, err := New(Config{
			Backend: handBackHangs{tb.backend}, Topology: tb.topo, Handler: h, Concurrency: 1,
			Logger: quietLog, PollWait: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-h.started
		waitFor(t, func() bool { return d.Held() == 1 })
		const grace = time.Second
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		start := time.Now()
		if err := d.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop = %v, want the deadline passed with a delivery running", err)
		}
		if took := time.Since(start); took > 2*grace {
			t.Fatalf("Stop with a %s context took %s", grace, took)
		}
	})
}

// callsHang is a backend whose deletes, or whose sends, hang until their
// context ends, as calls to an unreachable backend do.
type callsHang struct {
	queue.Backend
	deletes, sends bool
}

func (b callsHang) Delete(ctx context.Context, p *queue.DeleteParams) ([]error, error) {
	if b.deletes {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.Backend.Delete(ctx, p)
}

func (b callsHang) Send(ctx context.Context, p *queue.SendParams) ([]queue.SendResult, error) {
	if b.sends {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.Backend.Send(ctx, p)
}

// TestStopIsBoundedWithCallsHanging: the acks and moves that deliveries
// leave running (an ack after its slot was freed, a retry's move) are
// given up when Stop's context ends, like the hand-back of held jobs: each
// had a 30s deadline of its own, which Stop waited out, so with the backend
// unreachable at shutdown Stop(ctx) overran its context by up to 30s. The
// jobs stay on their queue and come back after their visibility timeout.
func TestStopIsBoundedWithCallsHanging(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		backend func(queue.Backend) queue.Backend
		fail    bool
	}{
		{"ack", func(b queue.Backend) queue.Backend { return callsHang{Backend: b, deletes: true} }, false},
		{"retry", func(b queue.Backend) queue.Backend { return callsHang{Backend: b, sends: true} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tb := setup(t, "lanes:\n  - {name: std, shards: 1, visibility_timeout: 3s}\n")
				q := tb.topo.ShardQueue("std", 0)
				tb.enqueue(t, q, testEnvelope("t", "a", time.Now()))
				started := make(chan struct{})
				var once sync.Once
				d, err := New(Config{
					Backend: tt.backend(tb.backend), Topology: tb.topo, Concurrency: 1,
					Logger: quietLog, PollWait: 100 * time.Millisecond,
					Handler: HandlerFunc(func(context.Context, *Job) error {
						once.Do(func() { close(started) })
						if tt.fail {
							return errors.New("try again")
						}
						return nil
					}),
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := d.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				<-started
				synctest.Wait() // the ack or the move is under way, and hangs
				const grace = time.Second
				ctx, cancel := context.WithTimeout(context.Background(), grace)
				defer cancel()
				start := time.Now()
				_ = d.Stop(ctx)
				if took := time.Since(start); took > 2*grace {
					t.Fatalf("Stop with a %s context took %s", grace, took)
				}
				if s := stats(t, tb, q); s.Visible+s.InFlight+s.Delayed != 1 {
					t.Errorf("shard queue after stop: %+v, want the one job still on it", s)
				}
			})
		})
	}
}

// TestStopWhileReadingStrandsNothing stops a drainer while its pollers
// read a backlog as fast as they can. Every job is then delivered or
// visible again at once: none is left hidden until its visibility timeout.
// On SQS, Stop used to cut off the pollers' receives, and a receive being
// answered then left its messages received on the server, unseen.
func TestStopWhileReadingStrandsNothing(t *testing.T) {
	t.Parallel()
	onEachBackend(t, oneLane, func(t *testing.T, tb *testBundle) {
		const jobs = 2000
		now := time.Now()
		for s := range 4 {
			envs := make([]*envelope.Envelope, 0, jobs/4)
			for i := range jobs / 4 {
				envs = append(envs, testEnvelope(fmt.Sprint("t", i%10), fmt.Sprint("job-", s, "-", i), now))
			}
			tb.enqueue(t, tb.topo.ShardQueue("std", s), envs...)
		}
		rec := newRecorder()
		d, err := New(Config{Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 1, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		rec.waitCount(t, 1) // the pollers are reading
		if err := d.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		var visible, hidden int64
		for _, q := range []string{
			tb.topo.ShardQueue("std", 0), tb.topo.ShardQueue("std", 1), tb.topo.ShardQueue("std", 2),
			tb.topo.ShardQueue("std", 3), tb.topo.SpilloverQueue("std"), tb.topo.BacklogQueue("std"), tb.topo.DLQ("std"),
		} {
			s := stats(t, tb, q)
			visible += s.Visible + s.Delayed
			hidden += s.InFlight
		}
		delivered := d.Counts().Delivered
		if hidden != 0 || visible+delivered < jobs {
			t.Fatalf("after Stop: %d jobs visible, %d hidden, %d delivered; want all %d visible or delivered, none hidden", visible, hidden, delivered, jobs)
		}
	})
}

// TestDeliveryStartedAfterHandlerCancelIsCancelled: a delivery's context
// is not a child of handlerCtx (deliver), so one registered after
// handlerCtx ended, and after cancelDeliveries ran, must be cancelled as
// it registers, as a child would have been.
func TestDeliveryStartedAfterHandlerCancelIsCancelled(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	d, err := New(Config{Backend: tb.backend, Topology: tb.topo, Handler: HandlerFunc(func(context.Context, *Job) error { return nil }), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	running, cancelRunning := context.WithCancel(context.WithoutCancel(d.handlerCtx))
	d.inDelivery(&job{}, cancelRunning)
	d.handlerCancel()
	select {
	case <-running.Done(): // by cancelDeliveries
	case <-time.After(10 * time.Second):
		t.Fatal("a running delivery was not cancelled with handlerCtx")
	}
	late, cancelLate := context.WithCancel(context.WithoutCancel(d.handlerCtx))
	d.inDelivery(&job{}, cancelLate)
	if late.Err() == nil {
		t.Error("a delivery registered after handlerCtx ended was not cancelled")
	}
	if err := d.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}
