package drainer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
)

// Held jobs: lease renewal while they wait, release on stop, and the
// housekeeping that refreshes limits and the fairness gauges.

// releaseHeld makes the jobs that were read ahead but never started
// visible again, so another drainer takes them at once; it gives up when
// ctx (Stop's) ends, and the jobs left come back after their visibility
// timeout.
func (d *Drainer) releaseHeld(ctx context.Context) {
	d.mu.Lock()
	d.releaseHeldIf(ctx, func(*job) bool { return true })
}

// releaseClosed hands back the held jobs of closed lanes.
func (d *Drainer) releaseClosed() {
	d.mu.Lock()
	d.releaseHeldIf(d.handlerCtx, func(j *job) bool { return j.q.inbox.closed })
}

// releaseHeldIf makes the held jobs that drop picks visible again, each
// call within opTimeout and ctx. Called with d.mu held; it unlocks it.
func (d *Drainer) releaseHeldIf(ctx context.Context, drop func(*job) bool) {
	held := d.sched.RemoveIf(func(_ string, _ scheduler.Class, j *job) bool { return drop(j) })
	d.freeRoomLocked()
	d.mu.Unlock()
	d.handBack(ctx, held)
}

// handBack makes jobs that were received but never started, or whose
// worker went away before answering, visible again at once, within
// opTimeout and ctx. No attempt is counted for them.
//
// A job on its last receive before the backend's redrive limit is
// requeued instead (a fresh copy, receive count zero): handed back again
// and again unstarted (a lane whose workers come and go, drainers
// restarted in turn), it would otherwise be dead-lettered by the backend
// with no attempt ever made.
func (d *Drainer) handBack(ctx context.Context, jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	var back []*job
	requeue := map[*queueBuf][]*job{}
	for _, j := range jobs {
		if j.msg.ReceiveCount >= j.q.inbox.policy.WithDefaults().MaxReceives {
			requeue[j.q] = append(requeue[j.q], j)
		} else {
			back = append(back, j)
		}
	}
	for q, jobs := range requeue {
		for start := 0; start < len(jobs); start += queue.MaxBatch {
			d.moveChunk(ctx, jobs[start:min(start+queue.MaxBatch, len(jobs))], q.name,
				sideliner.Decision{Action: sideliner.Requeue, Reason: sideliner.ReasonReleased})
		}
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for q, receipts := range byQueue(back) {
		if err := queue.SetVisibility(ctx, d.cfg.Backend, q, receipts, 0); err != nil {
			// They come back when their visibility timeout runs out.
			d.cfg.Logger.Warn("hand back received jobs", slog.String("queue", q), slog.Int("jobs", len(receipts)), slog.Any("error", err))
		}
	}
}

func byQueue(jobs []*job) map[string][]string {
	m := map[string][]string{}
	for _, j := range jobs {
		m[j.q.name] = append(m[j.q.name], j.msg.ReceiptHandle)
	}
	return m
}

// renewHeld extends the leases of jobs held past a third of their lane's
// visibility timeout, in batches, so that a job waiting for a slot is not
// taken by another drainer. A renewal the backend refuses means the lease
// is gone: the job is dropped from the read-ahead (another consumer has
// it, or will).
func (d *Drainer) renewHeld(ctx context.Context) {
	t := time.NewTicker(d.renewInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.releaseNow:
			d.releaseClosed()
			continue
		case <-t.C:
		}
		now := d.cfg.Now()
		var due []*job
		d.mu.Lock()
		d.sched.Each(func(_ string, _ scheduler.Class, j *job) {
			if now.Sub(j.leasedAt) > j.q.inbox.visibility/3 {
				due = append(due, j)
			}
		})
		d.mu.Unlock()
		if len(due) == 0 {
			continue
		}
		lost, failed := d.renew(ctx, due)
		// A lease counts as renewed only once the backend said so, and
		// only for the jobs still held: a job granted while the call ran
		// is the lease keeper's now, and keeps the time its lease was
		// really last set (a renewal marked before a call that then
		// failed left it a third of the timeout short, and its lease
		// ran out in delivery). A failed one is due again at the next
		// tick.
		renewed := make(map[*job]bool, len(due))
		for _, j := range due {
			renewed[j] = !lost[j]
		}
		for _, j := range failed {
			renewed[j] = false
		}
		d.mu.Lock()
		d.sched.Each(func(_ string, _ scheduler.Class, j *job) {
			if renewed[j] {
				j.leasedAt = now
			}
		})
		d.mu.Unlock()
		if len(lost) > 0 {
			// Only jobs still held count: one that left while the call ran
			// (delivered, handed back) was refused for that, not lost.
			d.mu.Lock()
			dropped := d.sched.RemoveIf(func(_ string, _ scheduler.Class, j *job) bool { return lost[j] })
			d.freeRoomLocked()
			d.mu.Unlock()
			if len(dropped) > 0 {
				d.cfg.Logger.WarnContext(ctx, "held jobs lost their lease while waiting; another consumer takes them", slog.Int("jobs", len(dropped)))
			}
		}
	}
}

// renew extends the leases of jobs, a batch per queue at a time, each call
// within one renewal interval. It
// returns those whose lease the backend says is gone, and those whose
// renewal failed for another reason (the call failed): the caller tries
// these again at its next round, not a third of the timeout later, when
// the lease may have run out.
func (d *Drainer) renew(ctx context.Context, jobs []*job) (lost map[*job]bool, failed []*job) {
	byQ := map[*queueBuf][]*job{}
	for _, j := range jobs {
		byQ[j.q] = append(byQ[j.q], j)
	}
	lost = map[*job]bool{}
	for q, js := range byQ {
		for start := 0; start < len(js); start += queue.MaxBatch {
			chunk := js[start:min(start+queue.MaxBatch, len(js))]
			changes := make([]queue.VisibilityChange, len(chunk))
			for i, j := range chunk {
				changes[i] = queue.VisibilityChange{ReceiptHandle: j.msg.ReceiptHandle, Timeout: q.inbox.visibility}
			}
			// Each call gets a tick of its own: a hung call is given up
			// while the leases it renews still run, and tried again at
			// the next tick (held renewals had no deadline at all).
			cctx, cancel := context.WithTimeout(ctx, d.renewInterval())
			errs, err := d.cfg.Backend.ChangeVisibility(cctx, &queue.ChangeVisibilityParams{Queue: q.name, Changes: changes})
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					d.cfg.Logger.WarnContext(ctx, "renew leases", slog.String("queue", q.name), slog.Int("jobs", len(chunk)), slog.Any("error", err))
				}
				failed = append(failed, chunk...)
				continue
			}
			for i, e := range errs {
				switch {
				case errors.Is(e, queue.ErrReceiptInvalid):
					lost[chunk[i]] = true
				case e != nil:
					failed = append(failed, chunk[i])
				}
			}
		}
	}
	return lost, failed
}

// housekeep refreshes tenant limits and the fairness gauges, and forgets
// idle tenants.
func (d *Drainer) housekeep(ctx context.Context) {
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	sweeps := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.releaseNow:
			d.releaseClosed()
			continue
		case <-t.C:
		}
		now := d.cfg.Now()
		d.mu.Lock()
		d.sched.Refresh(now)
		if sweeps++; sweeps%30 == 0 {
			d.sched.Sweep(now)
		}
		stats := d.statsLocked(now, fairnessTop)
		d.mu.Unlock()
		d.signal() // limits may have been raised
		d.recordFairness(stats)
	}
}

// fairnessTop is the number of tenants per lane the gauges show.
const fairnessTop = 10

func (d *Drainer) recordFairness(stats []scheduler.GroupStats) {
	if d.cfg.Metrics == nil {
		return
	}
	for _, g := range stats {
		tenants := make([]metrics.TenantShare, len(g.Tenants))
		for i, t := range g.Tenants {
			tenants[i] = metrics.TenantShare{Tenant: t.Tenant, State: string(t.State), Share: t.Share}
		}
		d.cfg.Metrics.Fairness(g.Group, g.Utilization, g.Jain, g.Held, tenants)
	}
}
