package drainer

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/sideliner"
)

// Moving: the sideline decisions (spill, backlog, retry, dead-letter,
// drop, defer), carried out by relocate (one step on a queue.Mover, else
// send-then-delete) and batched where they can be.

// carryOut performs a non-delivery decision (see the sideliner's table),
// within opTimeout and parent: d.handlerCtx, or a context of it carrying the
// failed attempt's span.
func (d *Drainer) carryOut(parent context.Context, j *job, decision sideliner.Decision) {
	ctx, span := d.startSideline(parent, j, decision)
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	in := j.q.inbox
	log := d.jobLogger(j).With(slog.String("action", decision.Action.String()), slog.String("reason", string(decision.Reason)))
	l := &lease{backend: d.cfg.Backend, queue: j.q.name, receipt: j.msg.ReceiptHandle}
	record := func(counter *atomic.Int64, action string) {
		counter.Add(1)
		d.cfg.Metrics.Drain(in.lane.Name, action, string(decision.Reason))
	}
	switch decision.Action {
	case sideliner.Spill:
		if d.move(ctx, j, l, in.spillover, 0, log) {
			record(&d.counts.spilled, metrics.ActionSpilled)
		}
	case sideliner.Backlog:
		if d.move(ctx, j, l, in.backlog, 0, log) {
			record(&d.counts.backlogged, metrics.ActionBacklogged)
		}
	case sideliner.Requeue:
		if d.move(ctx, j, l, j.q.name, decision.Delay, log) {
			record(&d.counts.requeued, metrics.ActionRequeued)
		}
	case sideliner.Retry:
		if d.move(ctx, j, l, j.q.name, decision.Delay, log) {
			record(&d.counts.retried, metrics.ActionRetried)
		}
	case sideliner.DeadLetter:
		if j.env != nil {
			j.env.DeadLetterReason = string(decision.Reason)
		}
		log.WarnContext(ctx, "dead-lettering job")
		if d.move(ctx, j, l, in.dlq, 0, log) {
			record(&d.counts.deadLettered, metrics.ActionDeadLettered)
		}
	case sideliner.Drop:
		if err := l.ack(ctx); err != nil {
			spanFail(ctx, err)
			log.WarnContext(ctx, "drop: delete failed", slog.Any("error", err))
			return
		}
		record(&d.counts.dropped, metrics.ActionDropped)
		log.WarnContext(ctx, "dropped job past its TTL")
	case sideliner.Defer:
		if err := l.extend(ctx, decision.Delay); err != nil {
			spanFail(ctx, err)
			log.WarnContext(ctx, "defer failed", slog.Any("error", err))
			return
		}
		record(&d.counts.deferred, metrics.ActionDeferred)
	default:
		log.ErrorContext(ctx, "unexpected decision; leaving the job to come back after its visibility timeout")
	}
}

// move relocates the job's envelope to dest with delay and reports
// whether it was sent. If the send fails the original stays and comes
// back after its visibility timeout.
func (d *Drainer) move(ctx context.Context, j *job, l *lease, dest string, delay time.Duration, log *slog.Logger) bool {
	spanDestination(ctx, dest)
	body := j.msg.Body
	if j.env != nil {
		b, err := envelope.Encode(j.env)
		if err != nil {
			spanFail(ctx, err)
			log.ErrorContext(ctx, "encode envelope for move", slog.Any("error", err))
			d.moveFailed(j)
			return false
		}
		body = b
	}
	res, err := d.relocate(ctx, l.queue, dest, []queue.SendEntry{{ID: "0", Body: body, Delay: min(delay, queue.MaxDelay), GroupID: j.env.GetTenant()}}, []string{l.receipt})
	if err == nil && len(res) > 0 {
		err = res[0].Err
	}
	if err != nil {
		spanFail(ctx, err)
		d.moveFailed(j)
		log.WarnContext(ctx, "move: send failed; the job stays on its queue", slog.String("to", dest), slog.Any("error", err))
		return false
	}
	return true
}

// relocate is queue.Relocate, logging deletes that failed after their
// send: a duplicate may follow.
func (d *Drainer) relocate(ctx context.Context, src, dest string, entries []queue.SendEntry, receipts []string) ([]queue.SendResult, error) {
	res, deleteErr, err := queue.Relocate(ctx, d.cfg.Backend, src, dest, entries, receipts)
	if deleteErr != nil {
		d.cfg.Logger.WarnContext(ctx, "move: sent, but the original was not deleted; a duplicate may follow", slog.String("to", dest), slog.Any("error", deleteErr))
	}
	return res, err
}

func (d *Drainer) moveFailed(j *job) {
	d.counts.moveFailed.Add(1)
	d.cfg.Metrics.Drain(j.q.inbox.lane.Name, metrics.ActionMoveFailed, "")
}

func (d *Drainer) jobLogger(j *job) *slog.Logger {
	log := d.cfg.Logger.With(slog.String("queue", j.q.name), slog.String("message_id", j.msg.MessageID))
	if j.env != nil {
		log = log.With(slog.String("tenant", j.env.GetTenant()), slog.String("job_id", j.env.GetJobId()))
	}
	if j.bad != nil {
		log = log.With(slog.String("malformed", j.bad.Error()))
	}
	return log
}

// moveBatch moves jobs, all read from one queue, to dest with one
// relocate per batch of queue.MaxBatch, on the move budget: the caller (a
// poller) waits for a place, so reading slows down to what can be moved
// rather than piling up held leases. A job whose send fails stays on its
// queue and comes back after its visibility timeout. Nothing is lost.
func (d *Drainer) moveBatch(jobs []*job, dest string, decision sideliner.Decision) {
	d.moves <- struct{}{}
	d.work.Add(1)
	go func() {
		defer d.work.Done()
		defer func() { <-d.moves }()
		for start := 0; start < len(jobs); start += queue.MaxBatch {
			d.moveChunk(d.handlerCtx, jobs[start:min(start+queue.MaxBatch, len(jobs))], dest, decision)
		}
	}()
}

// moveChunk moves up to a batch of jobs read from one queue to dest,
// within opTimeout and ctx.
func (d *Drainer) moveChunk(ctx context.Context, jobs []*job, dest string, decision sideliner.Decision) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	src := jobs[0].q
	lane := src.inbox.lane.Name
	var (
		entries  = make([]queue.SendEntry, 0, len(jobs))
		receipts = make([]string, 0, len(jobs))
		kept     = make([]*job, 0, len(jobs)) // kept[i] and spans[i] for entries[i]
		spans    = make([]trace.Span, 0, len(jobs))
	)
	for _, j := range jobs {
		jctx, span := d.startSideline(ctx, j, decision)
		spanDestination(jctx, dest)
		body := j.msg.Body
		if j.env != nil {
			b, err := envelope.Encode(j.env)
			if err != nil {
				tracing.Fail(span, err)
				span.End()
				d.moveFailed(j)
				d.jobLogger(j).ErrorContext(ctx, "encode envelope for move", slog.Any("error", err))
				continue
			}
			body = b
		}
		kept = append(kept, j)
		spans = append(spans, span)
		entries = append(entries, queue.SendEntry{ID: strconv.Itoa(len(entries)), Body: body, GroupID: j.env.GetTenant()})
		receipts = append(receipts, j.msg.ReceiptHandle)
	}
	defer func() {
		for _, s := range spans {
			s.End()
		}
	}()
	if len(entries) == 0 {
		return
	}
	res, err := d.relocate(ctx, src.name, dest, entries, receipts)
	moved := 0
	for i, span := range spans {
		failure := err
		if failure == nil {
			failure = res[i].Err
		}
		if failure != nil {
			tracing.Fail(span, failure)
			d.moveFailed(kept[i])
			d.jobLogger(kept[i]).WarnContext(ctx, "move: send failed; the job stays on its queue", slog.String("to", dest), slog.Any("error", failure))
			continue
		}
		moved++
	}
	counter, action := &d.counts.spilled, metrics.ActionSpilled
	switch decision.Action {
	case sideliner.Backlog:
		counter, action = &d.counts.backlogged, metrics.ActionBacklogged
	case sideliner.Requeue:
		counter, action = &d.counts.requeued, metrics.ActionRequeued
	}
	counter.Add(int64(moved))
	for range moved {
		d.cfg.Metrics.Drain(lane, action, string(decision.Reason))
	}
}
