package drainer

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
)

// Reading: pollers receive batches and judge each message; deliverable
// jobs are held for the scheduler, the rest are moved or handled.

// job is a received message with its decoded envelope (nil if malformed).
type job struct {
	q        *queueBuf
	msg      queue.Message
	env      *envelope.Envelope
	bad      error     // why env is nil
	leasedAt time.Time // when its visibility was last set

	// In delivery (lease.go; guarded by Drainer.leaseMu, but lost):
	cancel   context.CancelFunc // cancels the handler's context
	renewing chan struct{}      // closed when the renewal that last took it ends
	lost     atomic.Bool        // the backend refused a renewal
}

func (d *Drainer) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// waitRoom blocks until the drainer may hold another batch from q: for a
// shard, room for fresh jobs in the read-ahead; for a sideline queue,
// room for sideline work. probe reports a shard read made only to look
// past full tenants (see below).
//
// Fresh and sideline jobs are bounded apart so that spillover and backlog
// jobs, held for the slots fresh work leaves, never stop the shards'
// pollers. A shard poller that waits leaves a quiet tenant's new job
// unread behind a flood until deliveries free a batch's worth of room
// (25 ms at 400 deliveries/s), and past the staleness bound the job goes
// to the backlog. With one bound for both, the noisy tenants' fresh
// budgets and the sideline read-ahead filled it together and the shard
// pollers waited on nearly every batch (issue 13). The tenants' budgets
// share out less than the fresh bound (freshBudget), so the pollers stop
// only when budgets shrank under jobs already held, or when very many
// tenants hold a batch each.
//
// While no tenant of the lane is quiet (sideliner.Lookout), a full
// tenant's jobs are held rather than moved aside, and the shard pollers
// read on only while the fresh jobs held fit the budgets (freshMax): the
// lane drains at the workers' pace, with no moves. A poller kept waiting
// for probeEvery reads one batch all the same, as a probe whose full
// tenants' jobs are moved aside, so that a tenant behind them that was
// never seen is found.
func (d *Drainer) waitRoom(ctx context.Context, q *queueBuf) (ok, probe bool) {
	var probeAt time.Time
	for {
		d.mu.Lock()
		var room bool
		var due time.Time // when to look again unsignalled: the probe's time, if only the pacing stops this read
		switch {
		case q.inbox.closed:
			// No worker serves the lane (pull): nothing to read for.
		case d.cfg.Policy.NoSideline:
			// Nothing is moved aside: every job is held, in the order read.
			room = d.sched.Held()+queue.MaxBatch <= d.heldMax
		case q.source == sideliner.SourceShard:
			held := d.sched.HeldIn(scheduler.Fresh) + queue.MaxBatch
			room = held <= d.heldMax
			if room && held > d.freshMax() && !q.lookout.Quiet(d.cfg.Now()) {
				now := time.Now()
				if probeAt.IsZero() {
					probeAt = now.Add(probeEvery)
				}
				probe = !now.Before(probeAt)
				room, due = probe, probeAt
			}
		default:
			room = d.sched.HeldIn(scheduler.Spillover)+d.sched.HeldIn(scheduler.Backlog) < d.sideMax
		}
		if room {
			d.mu.Unlock()
			return true, probe
		}
		d.roomWait = true
		ch := d.roomFreed
		d.mu.Unlock()
		if !d.waitFor(ctx, ch, due) {
			return false, false
		}
	}
}

// waitFor waits until ch is closed or, if probeAt is set, until then;
// false if ctx ended first.
func (d *Drainer) waitFor(ctx context.Context, ch <-chan struct{}, probeAt time.Time) bool {
	var due <-chan time.Time
	if !probeAt.IsZero() {
		t := time.NewTimer(time.Until(probeAt))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-ch:
	case <-due:
	case <-ctx.Done():
		return false
	}
	return true
}

// freeRoomLocked wakes the pollers waiting for room; callers hold d.mu.
func (d *Drainer) freeRoomLocked() {
	if d.roomWait {
		close(d.roomFreed)
		d.roomFreed = make(chan struct{})
		d.roomWait = false
	}
}

// pastBacklogFor is how long after a shard's head last held stale jobs
// its poller goes on reading the fresh jobs behind them (freshReader).
const pastBacklogFor = 10 * time.Second

// freshReader returns the backend's way to receive a shard's fresh jobs
// past a backlog at its head (queue.FreshReceiver), or nil where there is
// none to use: on backends without it, on sideline queues, and in lanes
// with no staleness bound or no sidelining.
func (d *Drainer) freshReader(q *queueBuf) queue.FreshReceiver {
	fresh, ok := d.cfg.Backend.(queue.FreshReceiver)
	if !ok || q.source != sideliner.SourceShard || q.inbox.policy.StalenessBound <= 0 || q.inbox.policy.NoSideline {
		return nil
	}
	return fresh
}

// poll reads q while the drainer runs. A shard whose head holds jobs past
// the lane's staleness bound (an outage's backlog) is read from both
// ends, where the backend can (freshReader): each round reads its fresh
// jobs, sent within the bound, and then its head, which moves the stale
// jobs aside. Read from the head alone, fresh jobs waited behind the
// whole backlog: 5 million jobs took minutes to read through.
func (d *Drainer) poll(ctx context.Context, q *queueBuf) {
	log := d.cfg.Logger.With(slog.String("queue", q.name))
	fresh := d.freshReader(q)
	for {
		ok, probe := d.waitRoom(ctx, q)
		if !ok {
			return
		}
		// The lane's visibility timeout is the queue's default; passing it
		// lets the backend know the lease, so acks in time skip SQS's
		// fencing call.
		params := &queue.ReceiveParams{
			Queue: q.name, Max: queue.MaxBatch, Wait: d.cfg.PollWait,
			VisibilityTimeout: q.inbox.visibility,
		}
		if now := d.cfg.Now(); fresh != nil && now.Sub(time.Unix(0, q.staleAt.Load())) < pastBacklogFor {
			past := *params
			past.Wait = 0 // the head read below is the one that waits
			msgs, err := fresh.ReceiveSentAfter(ctx, &past, now.Add(-q.inbox.policy.StalenessBound))
			if err == nil && len(msgs) > 0 {
				d.take(q, msgs, false)
				if ok, probe = d.waitRoom(ctx, q); !ok {
					return
				}
			} else if err != nil && ctx.Err() == nil {
				// The head read below fails too when the backend does,
				// and it warns and backs off: a warning here as well
				// doubled the lines of an outage.
				log.DebugContext(ctx, "receive of fresh jobs past the backlog failed", slog.Any("error", err))
			}
		}
		msgs, err := d.cfg.Backend.Receive(ctx, params)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.WarnContext(ctx, "receive failed", slog.Any("error", err))
			if !periodic.Sleep(ctx, time.Second) {
				return
			}
			continue
		}
		if len(msgs) > 0 && d.take(q, msgs, probe) && fresh != nil {
			// Logged once per shard (its pollers share staleAt) when
			// its head turns stale.
			now := d.cfg.Now()
			if last := q.staleAt.Swap(now.UnixNano()); now.Sub(time.Unix(0, last)) >= pastBacklogFor {
				log.InfoContext(ctx, "the shard's head holds jobs past the staleness bound: reading its fresh jobs past them while they are moved to the backlog queue",
					slog.Duration("staleness_bound", q.inbox.policy.StalenessBound))
			}
		}
		if len(msgs) < queue.MaxBatch && d.cfg.ReceiveLinger > 0 && !periodic.Sleep(ctx, d.cfg.ReceiveLinger) {
			return
		}
	}
}

// take judges a received batch: the deliverable jobs are held for the
// scheduler; the others are moved, in one batch per destination, or
// handled one by one (drop, dead-letter, defer). probe: the batch was
// read, with no quiet tenant known, to look past the full tenants (its
// full tenants' jobs are spilled). It reports whether the batch held
// stale jobs (sideliner.Backlog).
func (d *Drainer) take(q *queueBuf, msgs []queue.Message, probe bool) (stale bool) {
	now := d.cfg.Now()
	in := q.inbox
	var spill, backlog []*job
	var single []decided
	d.mu.Lock()
	for _, m := range msgs {
		j := &job{q: q, msg: m, leasedAt: now}
		j.env, j.bad = envelope.Decode(m.Body)
		decision := in.policy.Decide(d.input(j, now, false))
		switch decision.Action {
		case sideliner.Deliver:
			tenant := j.env.GetTenant()
			if in.policy.NoSideline {
				tenant = fifoKey(in.lane.Name)
			}
			// Sideline jobs are always held: their pollers read only
			// while the sideline read-ahead has room. A fresh job whose
			// tenant's read-ahead is full is moved aside, so that the
			// jobs behind it are seen, only while that can find a
			// quiet tenant's on this shard (sideliner.Lookout) and
			// holding it would not fit; else it is held too.
			class := classOf(q.source)
			spillFull := false
			if class == scheduler.Fresh && !in.policy.NoSideline {
				held := d.sched.HeldFresh(tenant)
				full := q.lookout.Saw(now, tenant, held, d.freshBudget())
				spillFull = full && (probe || q.lookout.Quiet(now) && !d.fitsPastShare(held))
			}
			if !spillFull && d.sched.Push(now, tenant, in.lane.Name, class, j) {
				continue
			}
			// The tenant's read-ahead is full (or the scheduler's
			// backstop refused it): let the others be seen.
			decision = in.policy.Decide(d.input(j, now, true))
			if decision.Action == sideliner.Spill {
				spill = append(spill, j)
				continue
			}
		case sideliner.Backlog:
			stale = true
			if d.sched.HeldIn(scheduler.Backlog) < d.staleMax && d.sched.Push(now, j.env.GetTenant(), in.lane.Name, scheduler.Backlog, j) {
				continue
			}
			backlog = append(backlog, j)
			continue
		}
		single = append(single, decided{j, decision})
	}
	closed := in.closed
	d.mu.Unlock()
	if closed {
		// The lane lost its slots while this batch was being received:
		// hand the jobs just held back too.
		select {
		case d.releaseNow <- struct{}{}:
		default:
		}
	}
	d.signal()
	if len(spill) > 0 {
		d.moveBatch(spill, in.spillover, sideliner.Decision{Action: sideliner.Spill, Reason: sideliner.ReasonReadAheadFull})
	}
	if len(backlog) > 0 {
		d.moveBatch(backlog, in.backlog, sideliner.Decision{Action: sideliner.Backlog, Reason: sideliner.ReasonStale})
	}
	for _, s := range single {
		d.work.Add(1)
		d.moves <- struct{}{}
		go func() {
			defer d.work.Done()
			defer func() { <-d.moves }()
			d.carryOut(d.handlerCtx, s.j, s.decision)
		}()
	}
	return stale
}

// freshMax is what the tenants' fresh budgets share: the read-ahead in
// all less the sideline read-ahead, and at least a quarter of it.
func (d *Drainer) freshMax() int {
	return max(d.heldMax-d.sideMax, d.heldMax/4)
}

// fitsPastShare reports whether a fresh job of a tenant that holds held
// fresh jobs, its share of the read-ahead or more (freshBudget), may be
// held all the same: when the fresh read-ahead has room for a batch more
// and the tenant is under Config.ReadAhead (when set). The shares divide
// the read-ahead only once it fills; before that, holding the job keeps
// the shard's pollers reading as a move would, without the move's four
// store calls. In a backlog drained faster than the tenants' jobs are
// spread over the shards, tenants swing between a full share and a low
// one, and spilling on every low sighting moved about 40 % of a
// 10-tenant backlog aside (the drain benchmark). Callers hold d.mu.
func (d *Drainer) fitsPastShare(held int) bool {
	if d.cfg.ReadAhead > 0 && held >= d.cfg.ReadAhead {
		return false
	}
	return d.sched.HeldIn(scheduler.Fresh)+queue.MaxBatch <= d.freshMax()
}

// freshBudget is how many fresh jobs one tenant may hold now: an equal
// share of freshMax among the tenants holding jobs (and one more), at
// least a receive batch. A tenant alone may hold a lot; a flood among
// many tenants is held to its share and the rest of it is moved to the
// spillover queue, so the pollers keep reading past it. Callers hold
// d.mu.
func (d *Drainer) freshBudget() int {
	if d.cfg.Policy.NoSideline {
		return d.heldMax
	}
	budget := max(queue.MaxBatch, d.freshMax()/(d.sched.Active()+1))
	if d.cfg.ReadAhead > 0 {
		budget = min(budget, d.cfg.ReadAhead)
	}
	return budget
}

// fifoKey is the scheduler's key for a lane's jobs in a plain FIFO
// (Policy.NoSideline): one queue per lane, in the order read, and no
// tenants. One queue for every lane made a head job whose lane had no
// free slot (pull workers grant credits per lane) block the jobs of
// lanes with idle workers behind it.
func fifoKey(lane string) string { return "\x00fifo/" + lane }

type decided struct {
	j        *job
	decision sideliner.Decision
}

func classOf(s sideliner.Source) scheduler.Class {
	switch s {
	case sideliner.SourceShard:
		return scheduler.Fresh
	case sideliner.SourceSpillover:
		return scheduler.Spillover
	}
	return scheduler.Backlog
}

// input is what the sideliner knows of j at now.
func (d *Drainer) input(j *job, now time.Time, readAheadFull bool) sideliner.Input {
	in := sideliner.Input{Now: now, Source: j.q.source, ReceiveCount: j.msg.ReceiveCount, Jitter: rand.Float64(), ReadAheadFull: readAheadFull}
	if j.env == nil {
		in.Malformed = true
		return in
	}
	in.EnqueuedAt = j.env.GetEnqueuedAt().AsTime()
	if e := j.env.GetExpiresAt(); e != nil {
		in.ExpiresAt = e.AsTime()
	}
	in.Attempts = int(j.env.GetAttempts())
	return in
}
