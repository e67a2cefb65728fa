package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/idlewait"
	"github.com/sluice-dev/sluice/internal/ratelog"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/worker"
)

// Delivering: the dispatcher hands free slots to the scheduler's picks;
// the lease keeper extends each delivery's lease; it then acks, retries
// or dead-letters.

// dispatch hands every free slot the job the scheduler picks.
func (d *Drainer) dispatch(ctx context.Context) {
	var timer *time.Timer
	for {
		tk, wait := d.grant()
		if tk != nil {
			select {
			case d.runs <- tk: // a runner waiting for work takes it
			default:
				d.work.Add(1)
				go d.runner(ctx, tk)
			}
			continue
		}
		var timeout <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			timeout = timer.C
		}
		select {
		case <-d.wake:
		case <-timeout:
		case <-ctx.Done():
			return
		}
	}
}

// grant returns the job the scheduler grants a free slot, if any, else
// how long until it may grant one (zero: when told).
func (d *Drainer) grant() (*scheduler.Ticket[*job], time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	tk, wait := d.sched.Next(d.cfg.Now())
	if tk != nil {
		d.freeRoomLocked()
	}
	return tk, wait
}

// runnerIdle is how long a runner waits for its next job before it ends.
const runnerIdle = time.Second

// runner runs tk, then the jobs the scheduler grants as it finishes
// each, then those the dispatcher hands it while it waits (d.runs), until
// none comes for runnerIdle or ctx (the dispatcher's) ends. A goroutine
// started per job cost about a tenth of the drainer's CPU in a pull-drain
// profile, most of it growing each new goroutine's stack to the depth of
// a delivery.
//
// A runner asks the scheduler itself before it waits: the slot its job
// just freed is usually the one the next job is granted, and handed over
// by the dispatcher that job cost two goroutine switches (the dispatcher
// woken to ask, the runner woken to take it). The scheduler grants the
// same job whoever asks.
func (d *Drainer) runner(ctx context.Context, tk *scheduler.Ticket[*job]) {
	defer d.work.Done()
	wait := idlewait.Waiter[*scheduler.Ticket[*job]]{Idle: runnerIdle}
	defer wait.Stop()
	for {
		d.run(tk)
		if ctx.Err() == nil {
			if next, _ := d.grant(); next != nil {
				tk = next
				continue
			}
		}
		var ok bool
		if tk, ok = wait.Next(d.runs, ctx.Done()); !ok {
			return
		}
	}
}

// run delivers a granted job, or drops it if it expired while held, and
// gives the slot back with the worker time it used.
func (d *Drainer) run(tk *scheduler.Ticket[*job]) {
	j := tk.Item
	start := d.cfg.Now()
	if e := j.env.GetExpiresAt(); e != nil && !start.Before(e.AsTime()) {
		// It never ran: no worker time to learn the tenant's cost from.
		d.mu.Lock()
		d.sched.Cancel(start, tk)
		d.mu.Unlock()
		d.signal()
		d.carryOut(d.handlerCtx, j, sideliner.Decision{Action: sideliner.Drop, Reason: sideliner.ReasonTTLExpired})
		return
	}
	d.deliver(tk, start)
}

// finish returns tk's slot to the scheduler at now, charging used.
func (d *Drainer) finish(tk *scheduler.Ticket[*job], now time.Time, used time.Duration) {
	d.mu.Lock()
	d.sched.Done(now, tk, used)
	d.mu.Unlock()
	d.signal()
}

// handle calls the handler, turning a panic into a failed attempt.
func (d *Drainer) handle(ctx context.Context, j *job, job *Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			d.counts.panicked.Add(1)
			d.cfg.Metrics.Drain(job.Lane, metrics.ActionPanicked, "")
			d.jobLogger(j).ErrorContext(ctx, "handler panicked", slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
			err = &PanicError{Value: r}
		}
	}()
	return d.cfg.Handler.Handle(ctx, job)
}

// deliver runs tk's job through the handler, started at now, and frees
// its delivery slot (finish) as soon as the handler returns. (A closure
// for that, and a clock reading each for its start and end, cost an
// allocation and two readings per job.)
func (d *Drainer) deliver(tk *scheduler.Ticket[*job], now time.Time) {
	j := tk.Item
	env := j.env
	// The job's logger (d.jobLogger) is built only where something is
	// logged, with no closure made for it per delivery: the
	// sync.OnceValue that did so was about a quarter of this function's
	// CPU in a pull-drain profile.
	attempt := int(env.GetAttempts()) + 1
	lane := j.q.inbox.lane.Name
	// A replayed job counts from its replay: its wait before it is the
	// outage or the fix the operator replayed it after.
	since := env.GetEnqueuedAt()
	if r := env.GetReplayedAt(); r != nil {
		since = r
	}
	dwell := now.Sub(since.AsTime())
	j.q.inbox.series.Dwell(dwell)
	// The first attempt's time goes into the envelope only when the job is
	// stored again (a failure below); an ack needs no timestamp built.
	first := env.GetFirstAttemptAt() == nil
	if first {
		j.q.inbox.series.AgeOfFirstAttempt(dwell)
	}
	spanCtx, span := d.startDeliver(d.handlerCtx, j, attempt)
	outcome, failure := "ack", error(nil)
	defer func() {
		if span != nil {
			endDeliver(span, outcome, failure)
		}
	}()
	// The delivery's context is not a child of handlerCtx: it is
	// cancelled with it through d.delivering (inDelivery,
	// cancelDeliveries). As a child, each was added to and taken from
	// handlerCtx's children under its lock, which every runner shares:
	// with 128 slots that, and the lock's contention, were several
	// percent of the gateway's CPU in a pull drain.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(spanCtx), d.cfg.HandlerTimeout)
	d.inDelivery(j, cancel)
	// The job's lane is its queue's, not the envelope's (which may name
	// another lane, or none): the pull hub places it by lane, and worker
	// keys are granted per lane.
	err := d.handle(ctx, j, &Job{
		ID: env.GetJobId(), Tenant: env.GetTenant(), Lane: lane, Payload: env.GetPayload(),
		Attributes: env.GetAttributes(), Attempt: attempt, EnqueuedAt: env.GetEnqueuedAt().AsTime(),
		TraceContext: tracing.Inject(ctx),
	})
	lost := d.delivered(j)
	cancel()
	end := d.cfg.Now()
	d.finish(tk, end, end.Sub(now))
	if lost {
		outcome, failure = "lease_lost", ErrLeaseLost
		d.counts.leaseLost.Add(1)
		d.cfg.Metrics.Drain(lane, metrics.ActionLeaseLost, "")
		return
	}
	if err != nil && d.handlerCtx.Err() != nil {
		// Stop's deadline passed and cancelled the delivery: the drainer
		// interrupted it, the worker did not fail it. No attempt is
		// counted and nothing is moved; the job comes back after its
		// visibility timeout (the worker may still be winding it down).
		// A pull hub answers such a delivery ErrReleased: it is not
		// released either, as Stop no longer waits for backend calls.
		outcome, failure = "interrupted", err
		d.jobLogger(j).Warn("delivery cancelled by stop; the job comes back after its visibility timeout", slog.Int("attempt", attempt))
		return
	}
	if errors.Is(err, worker.ErrReleased) {
		outcome, failure = "released", err
		d.release(j)
		return
	}
	if err == nil {
		// The ack (a durable delete) does not hold the delivery slot,
		// freed above (done): the next job starts while it commits, on
		// this runner too unless it is the one deleting (acker). The
		// attempt's span ends with the worker's answer, before it. (A
		// goroutine of its own per ack freed nothing more, and cost a
		// goroutine start per job.)
		endDeliver(span, outcome, nil)
		span = nil
		j.q.acks.ack(d.handlerCtx, j, lease{backend: d.cfg.Backend, queue: j.q.name, receipt: j.msg.ReceiptHandle})
		return
	}
	f := sideliner.FailureInput{Now: d.cfg.Now(), Attempts: attempt, Jitter: rand.Float64()}
	if IsPermanent(err) {
		f.Class = sideliner.Permanent
	}
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		f.RetryAfter = ra.After
	}
	if e := env.GetExpiresAt(); e != nil {
		f.ExpiresAt = e.AsTime()
	}
	decision := j.q.inbox.policy.AfterFailure(f)
	outcome, failure = decision.Action.String(), err
	d.jobLogger(j).WarnContext(ctx, "delivery failed", slog.Int("attempt", attempt), slog.String("next", decision.Action.String()),
		slog.Duration("delay", decision.Delay), slog.Any("error", err))
	if first {
		env.FirstAttemptAt = timestamppb.New(now)
	}
	env.Attempts = uint32(attempt)
	env.LastError = envelope.LastError(err)
	var pe *PanicError
	switch {
	case decision.Action != sideliner.DeadLetter:
	case errors.As(err, &pe):
		decision.Reason = sideliner.Reason(pe.Error())
	case decision.Reason == sideliner.ReasonPermanentFailure:
		decision.Reason = sideliner.Reason(string(decision.Reason) + ": " + env.LastError)
	}
	d.carryOut(spanCtx, j, decision)
}

// PanicError is the failure of an attempt whose handler panicked.
type PanicError struct{ Value any }

func (e *PanicError) Error() string { return fmt.Sprintf("%s: %v", sideliner.ReasonPanic, e.Value) }

// release hands j back to its queue at once, with no attempt counted:
// its worker went away before answering (handBack).
func (d *Drainer) release(j *job) {
	d.counts.released.Add(1)
	d.cfg.Metrics.Drain(j.q.inbox.lane.Name, metrics.ActionReleased, "")
	d.handBack(d.handlerCtx, []*job{j})
}

// acked counts j delivered once its delete succeeded (acker.acked).
func (d *Drainer) acked(j *job, err error) {
	if err != nil {
		// The job ran; it will be delivered again (at least once).
		d.deleteFailed.Do(func(skipped int64) {
			d.jobLogger(j).Warn("delete after delivery failed", slog.Any("error", err), ratelog.Suppressed(skipped))
		})
		if errors.Is(err, ErrLeaseLost) {
			d.counts.leaseLost.Add(1)
			d.cfg.Metrics.Drain(j.q.inbox.lane.Name, metrics.ActionLeaseLost, "")
		}
		return
	}
	d.counts.delivered.Add(1)
	j.q.inbox.series.Delivered()
}
