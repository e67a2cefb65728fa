// Package drainer takes jobs off the queues and delivers them to workers,
// fresh traffic first and no tenant able to monopolise a shard.
//
// Pollers (two per shard, one per sideline queue) long-poll the backend,
// a full batch at a time, into a small per-queue buffer. A dispatcher fills delivery slots: it picks a lane by smooth
// weighted round-robin over the lanes that have work (an idle lane's share
// goes to the others; no lane starves), then within the lane either a
// shard (round-robin) or, for a guaranteed minority share plus all spare
// capacity, the lane's spillover and backlog queues. For each message the
// sideliner decides: deliver, spill (tenant over its drain rate or at its
// in-flight limit), backlog (older than the lane's staleness bound), drop
// (past its TTL), dead-letter, or defer. Moves are send-then-delete and run
// beside deliveries, so sidelining a flood costs no delivery slots.
//
// A delivery holds the tenant's drain token and in-flight slot, extends the
// message's visibility while the worker runs (heartbeat), and then acks
// (delete), retries with exponential backoff through a delayed copy, or
// dead-letters. A drainer that loses a lease cannot ack or extend the
// message any more (the backend refuses its receipt).
package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/topology"
)

// Defaults for Config fields left zero.
const (
	ConcurrencyDefault    = 32
	PollWaitDefault       = queue.MaxWait
	SidelineShareDefault  = 10
	HandlerTimeoutDefault = 15 * time.Minute
	opTimeout             = 30 * time.Second
	// movesMin is the least number of concurrent moves (spill, backlog,
	// retry, dead-letter). Moves are two cheap backend calls that benefit
	// from batching, so they get their own, larger pool.
	movesMin = 64
)

// Config configures a Drainer.
type Config struct {
	// Backend to drain. Required.
	Backend queue.Backend
	// Topology lists the lanes and queues to drain. Required.
	Topology topology.Topology
	// Handler receives each job. Required.
	Handler Handler
	// Limits returns a tenant's drain limits (rate, burst, in flight).
	// Defaults to no per-tenant limits.
	Limits func(tenant string) sideliner.Limits
	// Policy holds the retry and deferral settings (MaxAttempts,
	// RetryBase, RetryCap, DeferDelay); each lane's staleness bound and
	// the topology's max receive count are filled in per lane.
	Policy sideliner.Policy
	// Concurrency is the most jobs delivered at once. Defaults to 32.
	Concurrency int
	// SidelineShare is the percentage of a lane's deliveries guaranteed to
	// its spillover and backlog queues while its shards have work; they
	// also get all capacity the shards leave. Defaults to 10.
	SidelineShare int
	// PollWait is each Receive's long-poll wait. Defaults to queue.MaxWait
	// (20 s): a wait ends as soon as a message arrives, so a long one only
	// saves empty receives (billed calls on SQS). Stop cancels it at once.
	PollWait time.Duration
	// ReceiveLinger is how long a poller waits after a receive that got
	// fewer than a full batch before it receives again, so that on SQS,
	// which answers a long poll as soon as one message is there, each
	// billed receive carries more jobs. It adds up to that much to the
	// dwell of jobs arriving at an idle queue. Defaults to 0 (no wait).
	ReceiveLinger time.Duration
	// HandlerTimeout bounds one delivery. Defaults to 15 minutes.
	HandlerTimeout time.Duration
	// Metrics records outcomes, dwell and age of first attempt; nil
	// records nothing.
	Metrics *metrics.Metrics
	// TracerProvider makes the drainer's spans (sluice.deliver,
	// sluice.move, sluice.defer, sluice.drop), which continue the trace
	// stored in each envelope. Defaults to the global provider, which
	// records nothing unless tracing is set up (internal/tracing).
	TracerProvider trace.TracerProvider
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Counts are the drainer's running totals, one per outcome.
type Counts struct {
	Delivered    int64 // acked by the worker and deleted
	Retried      int64 // failed and sent back with a backoff delay
	Spilled      int64 // moved to a spillover queue
	Backlogged   int64 // moved to a backlog queue
	Dropped      int64 // deleted past their TTL
	DeadLettered int64 // moved to a dead-letter queue
	Deferred     int64 // left on a sideline queue with a delay
	Requeued     int64 // re-sent to their sideline queue to reset the receive count
	LeaseLost    int64 // deliveries whose lease another consumer took
	MoveFailed   int64 // moves whose send failed (the job stays where it was)
}

// Drainer delivers jobs from a topology's queues to a Handler.
type Drainer struct {
	cfg     Config
	lanes   []*laneInbox
	picker  *weightedPicker
	limiter *sideliner.Limiter
	tracer  trace.Tracer

	mu     sync.Mutex    // guards buffers, pickers and round-robin positions
	notify chan struct{} // signalled when a buffer gains work
	slots  chan struct{} // one token per running delivery
	moves  chan struct{} // one token per running move
	acks   chan struct{} // one token per ack running after its delivery slot was freed

	pollCancel     context.CancelFunc
	dispatchCancel context.CancelFunc
	handlerCancel  context.CancelFunc
	handlerCtx     context.Context
	pollers        sync.WaitGroup
	dispatcher     sync.WaitGroup
	work           sync.WaitGroup // deliveries and moves
	started        atomic.Bool
	stopOnce       sync.Once
	stopErr        error

	counts struct {
		delivered, retried, spilled, backlogged, dropped, deadLettered,
		deferred, requeued, leaseLost, moveFailed atomic.Int64
	}
}

type laneInbox struct {
	lane      topology.Lane
	policy    sideliner.Policy
	shards    []*queueBuf
	side      []*queueBuf // spillover, backlog
	class     *weightedPicker
	shardNext int
	sideNext  int
	spillover string
	backlog   string
	dlq       string
}

// queueBuf holds messages received from one queue, waiting for a slot.
type queueBuf struct {
	inbox  *laneInbox
	name   string
	source sideliner.Source
	buf    []queue.Message
	space  chan struct{} // free places in buf
	// more is whether the last receive came back full, so the queue
	// likely has more waiting; guarded by Drainer.mu.
	more bool
}

// New validates cfg and returns a drainer.
func New(cfg Config) (*Drainer, error) {
	if cfg.Backend == nil || cfg.Handler == nil {
		return nil, errors.New("drainer: Backend and Handler are required")
	}
	if err := cfg.Topology.Validate(); err != nil {
		return nil, fmt.Errorf("drainer: topology: %w", err)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.SidelineShare = cmp.Or(cfg.SidelineShare, SidelineShareDefault)
	if cfg.SidelineShare < 1 || cfg.SidelineShare > 99 {
		return nil, fmt.Errorf("drainer: sideline share %d%%: must be 1 to 99", cfg.SidelineShare)
	}
	cfg.PollWait = cmp.Or(cfg.PollWait, PollWaitDefault)
	cfg.HandlerTimeout = cmp.Or(cfg.HandlerTimeout, HandlerTimeoutDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Limits == nil {
		cfg.Limits = func(string) sideliner.Limits { return sideliner.Limits{} }
	}
	limiter, err := sideliner.NewLimiter(sideliner.LimiterConfig{Limits: cfg.Limits})
	if err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	d := &Drainer{
		cfg: cfg, limiter: limiter, tracer: tracing.Tracer(cfg.TracerProvider),
		notify: make(chan struct{}, 1),
		slots:  make(chan struct{}, cfg.Concurrency),
		moves:  make(chan struct{}, max(cfg.Concurrency, movesMin)),
		acks:   make(chan struct{}, 4*cfg.Concurrency),
	}
	weights := make([]int, len(cfg.Topology.Lanes))
	for i, l := range cfg.Topology.Lanes {
		p := cfg.Policy
		p.StalenessBound = time.Duration(l.StalenessBound)
		p.MaxReceives = cfg.Topology.MaxReceiveCount
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("drainer: lane %s: %w", l.Name, err)
		}
		in := &laneInbox{
			lane: l, policy: p,
			class:     newWeightedPicker([]int{100 - cfg.SidelineShare, cfg.SidelineShare}),
			spillover: cfg.Topology.SpilloverQueue(l.Name),
			backlog:   cfg.Topology.BacklogQueue(l.Name),
			dlq:       cfg.Topology.DLQ(l.Name),
		}
		for s := range l.Shards {
			in.shards = append(in.shards, newQueueBuf(in, cfg.Topology.ShardQueue(l.Name, s), sideliner.SourceShard))
		}
		in.side = []*queueBuf{
			newQueueBuf(in, in.spillover, sideliner.SourceSpillover),
			newQueueBuf(in, in.backlog, sideliner.SourceBacklog),
		}
		d.lanes = append(d.lanes, in)
		weights[i] = l.Weight
	}
	d.picker = newWeightedPicker(weights)
	return d, nil
}

// bufferBatches is each queue buffer's size in receive batches. With two,
// a poller asks for a whole batch whenever half the buffer is free, so
// receives are full batches (one claim, one billed call, for ten jobs)
// while the dispatcher still has the other half to work on.
const bufferBatches = 2

func newQueueBuf(in *laneInbox, name string, src sideliner.Source) *queueBuf {
	n := bufferBatches * queue.MaxBatch
	q := &queueBuf{inbox: in, name: name, source: src, space: make(chan struct{}, n)}
	for range n {
		q.space <- struct{}{}
	}
	return q
}

// Start launches the pollers and the dispatcher and returns.
func (d *Drainer) Start(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return errors.New("drainer: already started, or stopped")
	}
	base := context.WithoutCancel(ctx)
	var pollCtx, dispatchCtx context.Context
	pollCtx, d.pollCancel = context.WithCancel(base)
	dispatchCtx, d.dispatchCancel = context.WithCancel(base)
	d.handlerCtx, d.handlerCancel = context.WithCancel(base)
	for _, in := range d.lanes {
		// Shards get a poller per buffered batch, so one receive can be
		// under way while the other's jobs are dispatched; the sideline
		// queues, which serve only a share, get one.
		for _, q := range in.shards {
			for range bufferBatches {
				d.pollers.Go(func() { d.poll(pollCtx, q) })
			}
		}
		for _, q := range in.side {
			d.pollers.Go(func() { d.poll(pollCtx, q) })
		}
	}
	d.dispatcher.Go(func() { d.dispatch(dispatchCtx) })
	d.pollers.Go(func() { d.sweepLimiter(pollCtx) })
	return nil
}

// Stop stops polling, hands back jobs received but not started (visibility
// 0), and waits for running deliveries and moves until ctx ends;
// deliveries still running then are cancelled and their jobs come back
// after their visibility timeout. Safe to call twice or without Start.
func (d *Drainer) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() {
		if d.started.CompareAndSwap(false, true) {
			return // never started; a later Start fails
		}
		d.pollCancel()
		d.pollers.Wait()
		d.dispatchCancel()
		d.dispatcher.Wait()
		d.releaseBuffered()
		done := make(chan struct{})
		go func() { d.work.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			d.handlerCancel()
			<-done
			d.stopErr = fmt.Errorf("drainer: stop: deliveries still running at deadline: %w", ctx.Err())
		}
		d.handlerCancel()
	})
	return d.stopErr
}

// Counts returns the running totals.
func (d *Drainer) Counts() Counts {
	c := &d.counts
	return Counts{
		Delivered: c.delivered.Load(), Retried: c.retried.Load(), Spilled: c.spilled.Load(),
		Backlogged: c.backlogged.Load(), Dropped: c.dropped.Load(), DeadLettered: c.deadLettered.Load(),
		Deferred: c.deferred.Load(), Requeued: c.requeued.Load(), LeaseLost: c.leaseLost.Load(),
		MoveFailed: c.moveFailed.Load(),
	}
}

func (d *Drainer) poll(ctx context.Context, q *queueBuf) {
	log := d.cfg.Logger.With(slog.String("queue", q.name))
	for {
		n, ok := takeSpace(ctx, q.space)
		if !ok {
			return
		}
		// The lane's visibility timeout is the queue's default; passing it
		// lets the backend know the lease, so acks in time skip SQS's
		// fencing call.
		msgs, err := d.cfg.Backend.Receive(ctx, &queue.ReceiveParams{Queue: q.name, Max: n, Wait: d.cfg.PollWait,
			VisibilityTimeout: time.Duration(q.inbox.lane.VisibilityTimeout)})
		giveSpace(q.space, n-len(msgs))
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
		d.mu.Lock()
		wasMore := q.more
		q.more = len(msgs) == n
		q.buf = append(q.buf, msgs...)
		d.mu.Unlock()
		if len(msgs) == 0 && !wasMore {
			continue
		}
		select {
		case d.notify <- struct{}{}:
		default:
		}
		if len(msgs) < n && d.cfg.ReceiveLinger > 0 && !periodic.Sleep(ctx, d.cfg.ReceiveLinger) {
			return
		}
	}
}

// takeSpace blocks until a whole batch of buffer places is free and takes
// it, so that every receive asks for a full batch.
func takeSpace(ctx context.Context, space chan struct{}) (int, bool) {
	for n := range queue.MaxBatch {
		select {
		case <-space:
		case <-ctx.Done():
			giveSpace(space, n)
			return 0, false
		}
	}
	return queue.MaxBatch, true
}

func giveSpace(space chan struct{}, n int) {
	for range n {
		space <- struct{}{}
	}
}

// job is a message taken from a buffer, with its decoded envelope (nil if
// malformed).
type job struct {
	q   *queueBuf
	msg queue.Message
	env *envelope.Envelope
	bad error // why env is nil
}

func (d *Drainer) dispatch(ctx context.Context) {
	for {
		select {
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		// Sideline decisions do not use the slot: keep taking messages
		// until one is to be delivered.
		for {
			j := d.next(ctx)
			if j == nil {
				<-d.slots
				return
			}
			decision, release := d.decide(j)
			d.work.Add(1)
			if decision.Action == sideliner.Deliver {
				go d.deliver(j, release)
				break
			}
			select {
			case d.moves <- struct{}{}:
			case <-ctx.Done():
				d.work.Done()
				<-d.slots
				return
			}
			go func() {
				defer d.work.Done()
				defer func() { <-d.moves }()
				d.carryOut(context.Background(), j, decision)
			}()
		}
	}
}

// next waits for the next message by lane weight and sideline share; nil
// when ctx ends.
func (d *Drainer) next(ctx context.Context) *job {
	patient := true
	for {
		d.mu.Lock()
		q, waiting := d.pickLocked(patient)
		if q != nil {
			m := q.buf[0]
			q.buf = q.buf[1:]
			d.mu.Unlock()
			giveSpace(q.space, 1)
			j := &job{q: q, msg: m}
			j.env, j.bad = envelope.Decode(m.Body)
			return j
		}
		d.mu.Unlock()
		if waiting {
			// A shard's next batch is on its way: give it a moment, then
			// let the sideline queues have the spare capacity after all.
			select {
			case <-d.notify:
			case <-time.After(refillPatience):
				patient = false
			case <-ctx.Done():
				return nil
			}
			continue
		}
		patient = true
		select {
		case <-d.notify:
		case <-ctx.Done():
			return nil
		}
	}
}

// refillPatience is how long the dispatcher holds spare capacity for a
// shard whose buffer ran dry while its queue still had more, before giving
// it to the sideline queues.
const refillPatience = 5 * time.Millisecond

// pickLocked chooses the buffer to serve next; callers hold d.mu. When
// patient, a shard whose buffer ran dry while its queue still holds more
// (its last receive came back full) still counts as having work, so the
// sideline queues get their share and not the whole lane while its next
// batch is on the way: fresh work keeps going first. It then returns nil
// and waiting true.
func (d *Drainer) pickLocked(patient bool) (q *queueBuf, waiting bool) {
	i := d.picker.pick(func(i int) bool { return d.lanes[i].hasWork() })
	if i < 0 {
		return nil, false
	}
	in := d.lanes[i]
	class := in.class.pick(func(c int) bool {
		if c == 0 {
			return anyBuffered(in.shards) || (patient && anyMore(in.shards))
		}
		return anyBuffered(in.side)
	})
	if class == 0 {
		q = roundRobin(in.shards, &in.shardNext)
		return q, q == nil
	}
	return roundRobin(in.side, &in.sideNext), false
}

func (in *laneInbox) hasWork() bool { return anyBuffered(in.shards) || anyBuffered(in.side) }

func anyMore(qs []*queueBuf) bool {
	for _, q := range qs {
		if q.more {
			return true
		}
	}
	return false
}

func anyBuffered(qs []*queueBuf) bool {
	for _, q := range qs {
		if len(q.buf) > 0 {
			return true
		}
	}
	return false
}

// roundRobin returns the next non-empty buffer after *next and advances it.
func roundRobin(qs []*queueBuf, next *int) *queueBuf {
	for range qs {
		q := qs[*next%len(qs)]
		*next = (*next + 1) % len(qs)
		if len(q.buf) > 0 {
			return q
		}
	}
	return nil
}

// decide asks the sideliner what to do with j, holding the tenant's
// token and slot when the answer is Deliver.
func (d *Drainer) decide(j *job) (sideliner.Decision, func()) {
	in := sideliner.Input{Now: d.cfg.Now(), Source: j.q.source, ReceiveCount: j.msg.ReceiveCount, Jitter: rand.Float64()}
	if j.env == nil {
		in.Malformed = true
		return j.q.inbox.policy.Decide(in), func() {}
	}
	in.EnqueuedAt = j.env.GetEnqueuedAt().AsTime()
	if e := j.env.GetExpiresAt(); e != nil {
		in.ExpiresAt = e.AsTime()
	}
	in.Attempts = int(j.env.GetAttempts())
	return d.limiter.Admit(j.q.inbox.policy, j.env.GetTenant(), in)
}

func (d *Drainer) deliver(j *job, release func()) {
	defer d.work.Done()
	defer func() { <-d.slots }()
	env := j.env
	log := d.jobLogger(j)
	attempt := int(env.GetAttempts()) + 1
	now := d.cfg.Now()
	lane := j.q.inbox.lane.Name
	dwell := now.Sub(env.GetEnqueuedAt().AsTime())
	d.cfg.Metrics.Dwell(lane, dwell)
	if env.GetFirstAttemptAt() == nil {
		env.FirstAttemptAt = timestamppb.New(now)
		d.cfg.Metrics.AgeOfFirstAttempt(lane, dwell)
	}
	vis := time.Duration(j.q.inbox.lane.VisibilityTimeout)
	l := &lease{backend: d.cfg.Backend, queue: j.q.name, receipt: j.msg.ReceiptHandle}
	spanCtx, span := d.startDeliver(d.handlerCtx, j, attempt)
	outcome, failure := "ack", error(nil)
	defer func() { endDeliver(span, outcome, failure) }()
	ctx, cancel := context.WithTimeout(spanCtx, d.cfg.HandlerTimeout)
	var lost atomic.Bool
	stopHeartbeat := l.heartbeat(vis, func(err error) {
		lost.Store(true)
		log.WarnContext(ctx, "lease lost during delivery; cancelling it", slog.Any("error", err))
		cancel()
	})
	err := d.cfg.Handler.Handle(ctx, &Job{
		ID: env.GetJobId(), Tenant: env.GetTenant(), Lane: env.GetLane(), Payload: env.GetPayload(),
		Attributes: env.GetAttributes(), Attempt: attempt, EnqueuedAt: env.GetEnqueuedAt().AsTime(),
		TraceContext: tracing.Inject(ctx),
	})
	stopHeartbeat()
	cancel()
	release()
	if lost.Load() {
		outcome, failure = "lease_lost", ErrLeaseLost
		d.counts.leaseLost.Add(1)
		d.cfg.Metrics.Drain(lane, metrics.ActionLeaseLost, "")
		return
	}
	if err == nil {
		// The ack (a durable delete) need not hold the delivery slot: the
		// next job can start while it commits. Past 4 acks per slot,
		// deliveries wait for their own.
		select {
		case d.acks <- struct{}{}:
			d.work.Add(1)
			go func() {
				defer d.work.Done()
				defer func() { <-d.acks }()
				d.ack(j, l, log)
			}()
		default:
			d.ack(j, l, log)
		}
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
	log.WarnContext(ctx, "delivery failed", slog.Int("attempt", attempt), slog.String("next", decision.Action.String()),
		slog.Duration("delay", decision.Delay), slog.Any("error", err))
	env.Attempts = uint32(attempt)
	if decision.Action == sideliner.DeadLetter && decision.Reason == sideliner.ReasonPermanentFailure {
		decision.Reason = sideliner.Reason(string(decision.Reason) + ": " + err.Error())
	}
	d.carryOut(spanCtx, j, decision)
}

func (d *Drainer) ack(j *job, l *lease, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := l.ack(ctx); err != nil {
		// The job ran; it will be delivered again (at least once).
		log.WarnContext(ctx, "delete after delivery failed", slog.Any("error", err))
		if errors.Is(err, ErrLeaseLost) {
			d.counts.leaseLost.Add(1)
			d.cfg.Metrics.Drain(j.q.inbox.lane.Name, metrics.ActionLeaseLost, "")
		}
		return
	}
	d.counts.delivered.Add(1)
	d.cfg.Metrics.Drain(j.q.inbox.lane.Name, metrics.ActionDelivered, "")
}

// carryOut performs a non-delivery decision (see the sideliner's table).
// parent carries the failed attempt's span, if any.
func (d *Drainer) carryOut(parent context.Context, j *job, decision sideliner.Decision) {
	ctx, span := d.startSideline(context.WithoutCancel(parent), j, decision)
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

// move sends the job's envelope to dest with delay, then deletes the
// original, and reports whether the send succeeded. If the send fails the
// original stays and comes back after its visibility timeout; if the
// delete fails a duplicate may follow. Nothing is lost either way.
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
	res, err := d.cfg.Backend.Send(ctx, &queue.SendParams{Queue: dest, Entries: []queue.SendEntry{{ID: "0", Body: body, Delay: min(delay, queue.MaxDelay)}}})
	if err == nil && len(res) > 0 {
		err = res[0].Err
	}
	if err != nil {
		spanFail(ctx, err)
		d.moveFailed(j)
		log.WarnContext(ctx, "move: send failed; the job stays on its queue", slog.String("to", dest), slog.Any("error", err))
		return false
	}
	if err := l.ack(ctx); err != nil {
		log.WarnContext(ctx, "move: delete of the original failed; a duplicate may follow", slog.String("to", dest), slog.Any("error", err))
	}
	return true
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

// releaseBuffered makes jobs that were received but never started visible
// again, so another drainer takes them at once.
func (d *Drainer) releaseBuffered() {
	d.mu.Lock()
	defer d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, in := range d.lanes {
		for _, q := range append(append([]*queueBuf{}, in.shards...), in.side...) {
			receipts := make([]string, len(q.buf))
			for i, m := range q.buf {
				receipts[i] = m.ReceiptHandle
			}
			if err := queue.SetVisibility(ctx, d.cfg.Backend, q.name, receipts, 0); err != nil {
				d.cfg.Logger.Warn("release received jobs", slog.String("queue", q.name), slog.Int("jobs", len(receipts)), slog.Any("error", err))
			}
			q.buf = nil
		}
	}
}

// sweepLimiter evicts idle tenants' drain state so memory stays bounded.
func (d *Drainer) sweepLimiter(ctx context.Context) {
	periodic.Every(ctx, sideliner.IdleTTLDefault/2, func(context.Context) { d.limiter.Sweep(d.cfg.Now()) })
}
