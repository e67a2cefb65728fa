// Package drainer takes jobs off the queues and delivers them to workers,
// fresh traffic first and shared fairly among tenants by weight, in worker
// time, with no worker idle while a job waits.
//
// Pollers (two per shard, one per sideline queue) long-poll the backend a
// full batch at a time. Each received message is judged by the sideliner
// (malformed, expired, out of attempts, stale) and the deliverable ones
// are held, read ahead, in their tenant's bounded queue in the scheduler
// (package scheduler): fresh from a shard, or spillover, or backlog. A
// dispatcher hands every free delivery slot to the job the scheduler
// picks. A tenant whose read-ahead budget is full has the rest of its
// jobs moved to the lane's spillover queue, so the shards' heads stay
// clear for everyone else; stale jobs go to the backlog queue once the
// stale read-ahead is full. Moves are batched (one send and one delete
// per receive and destination) and run on a budget of their own, so
// sidelining never takes delivery slots.
//
// A delivery extends the message's visibility while the worker runs
// (heartbeat), and then acks (delete), retries with exponential backoff
// through a delayed copy, or dead-letters. Held jobs have their visibility
// renewed while they wait. A handler that panics fails its attempt, with
// the stack in the log. A drainer that loses a lease cannot ack or extend
// the message any more (the backend refuses its receipt).
package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
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
	"github.com/sluice-dev/sluice/scheduler"
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
	// retry, dead-letter). Moves are cheap backend calls that benefit from
	// batching, so they get their own, larger pool.
	movesMin = 64
	// statsInterval is how often the fairness gauges are refreshed.
	statsInterval = 2 * time.Second
)

// Config configures a Drainer.
type Config struct {
	// Backend to drain. Required.
	Backend queue.Backend
	// Topology lists the lanes and queues to drain. Required.
	Topology topology.Topology
	// Handler receives each job. Required.
	Handler Handler
	// Limits returns a tenant's scheduling limits: weight, guaranteed
	// share, fair rate and hard ceilings. Defaults to weight 1 and no
	// limits.
	Limits func(tenant string) scheduler.Limits
	// Policy holds the retry and deferral settings (MaxAttempts,
	// RetryBase, RetryCap, DeferDelay); each lane's staleness bound and
	// the topology's max receive count are filled in per lane.
	Policy sideliner.Policy
	// Concurrency is the most jobs delivered at once. Defaults to 32.
	Concurrency int
	// SidelineShare is the percentage of the delivery slots guaranteed to
	// spillover and backlog work while it waits; it also gets every slot
	// that fresh work leaves free. Defaults to 10.
	SidelineShare int
	// ReadAhead is the most jobs of one tenant held in memory, waiting for
	// a slot; more are moved to the spillover queue. Defaults to
	// max(Concurrency, 20).
	ReadAhead int
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
	// Metrics records outcomes, dwell, age of first attempt and the
	// fairness gauges; nil records nothing.
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
	Panicked     int64 // deliveries whose handler panicked (each also retried or dead-lettered)
}

// Drainer delivers jobs from a topology's queues to a Handler.
type Drainer struct {
	cfg    Config
	lanes  []*laneInbox
	tracer trace.Tracer

	mu        sync.Mutex // guards sched and the fields below
	sched     *scheduler.Scheduler[*job]
	heldMax   int           // most jobs held in all
	staleMax  int           // most stale jobs held rather than moved
	sideMax   int           // most spillover/backlog jobs held
	roomFreed chan struct{} // closed and replaced when held jobs leave and a poller waits
	roomWait  bool          // a poller waits on roomFreed

	wake  chan struct{} // signalled when the dispatcher may have work
	moves chan struct{} // one token per running move
	acks  chan struct{} // one token per ack running after its delivery slot was freed

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
		deferred, requeued, leaseLost, moveFailed, panicked atomic.Int64
	}
}

type laneInbox struct {
	lane       topology.Lane
	policy     sideliner.Policy
	visibility time.Duration
	shards     []*queueBuf
	side       []*queueBuf // spillover, backlog
	spillover  string
	backlog    string
	dlq        string
}

// queueBuf is one queue the drainer reads.
type queueBuf struct {
	inbox  *laneInbox
	name   string
	source sideliner.Source
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
	if cfg.Concurrency < 1 || cfg.ReadAhead < 0 {
		return nil, errors.New("drainer: concurrency must be at least 1 and read-ahead not negative")
	}
	cfg.ReadAhead = cmp.Or(cfg.ReadAhead, max(cfg.Concurrency, 20))
	cfg.PollWait = cmp.Or(cfg.PollWait, PollWaitDefault)
	cfg.HandlerTimeout = cmp.Or(cfg.HandlerTimeout, HandlerTimeoutDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Limits == nil {
		cfg.Limits = func(string) scheduler.Limits { return scheduler.Limits{} }
	}
	d := &Drainer{
		cfg: cfg, tracer: tracing.Tracer(cfg.TracerProvider),
		wake:      make(chan struct{}, 1),
		roomFreed: make(chan struct{}),
		moves:     make(chan struct{}, max(cfg.Concurrency, movesMin)),
		acks:      make(chan struct{}, 4*cfg.Concurrency),
	}
	for _, l := range cfg.Topology.Lanes {
		p := cfg.Policy
		p.StalenessBound = time.Duration(l.StalenessBound)
		p.MaxReceives = cfg.Topology.MaxReceiveCount
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("drainer: lane %s: %w", l.Name, err)
		}
		in := &laneInbox{
			lane: l, policy: p, visibility: time.Duration(l.VisibilityTimeout),
			spillover: cfg.Topology.SpilloverQueue(l.Name),
			backlog:   cfg.Topology.BacklogQueue(l.Name),
			dlq:       cfg.Topology.DLQ(l.Name),
		}
		for s := range l.Shards {
			in.shards = append(in.shards, &queueBuf{inbox: in, name: cfg.Topology.ShardQueue(l.Name, s), source: sideliner.SourceShard})
		}
		in.side = []*queueBuf{
			{inbox: in, name: in.spillover, source: sideliner.SourceSpillover},
			{inbox: in, name: in.backlog, source: sideliner.SourceBacklog},
		}
		d.lanes = append(d.lanes, in)
	}
	// Read ahead enough for several tenants' budgets and a batch from
	// every poller; hold at most a slot's worth of stale and sideline jobs
	// each, so that old work never crowds out the view of fresh work.
	pollers := 0
	for _, in := range d.lanes {
		pollers += bufferBatches*len(in.shards) + len(in.side)
	}
	// The read-ahead in all is bounded for memory and lease renewals, not
	// to ration tenants: when many tenants hold jobs, each one's budget
	// shrinks (freshBudget) rather than the pollers stopping, so a quiet
	// tenant's job behind many floods is still read.
	d.heldMax = max(16*cfg.ReadAhead, 1024) + pollers*queue.MaxBatch
	d.staleMax = cfg.Concurrency
	d.sideMax = cfg.Concurrency
	readAhead := cfg.ReadAhead
	if cfg.Policy.NoSideline {
		// A plain FIFO (the benchmarks' baseline): every job is held as
		// one tenant's, in the order read, and nothing is moved aside.
		readAhead = d.heldMax + pollers*queue.MaxBatch
	}
	sched, err := scheduler.New[*job](scheduler.Config{
		Slots: cfg.Concurrency, SidelineShare: float64(cfg.SidelineShare) / 100,
		ReadAhead: readAhead, Limits: cfg.Limits,
	})
	if err != nil {
		return nil, fmt.Errorf("drainer: %w", err)
	}
	d.sched = sched
	return d, nil
}

// bufferBatches is the number of pollers per shard queue, so that one
// receive can be under way while the other's jobs are taken.
const bufferBatches = 2

// Start launches the pollers, the dispatcher and the housekeeping, and
// returns.
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
	d.pollers.Go(func() { d.renewHeld(pollCtx) })
	d.pollers.Go(func() { d.housekeep(pollCtx) })
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
		d.releaseHeld()
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
		MoveFailed: c.moveFailed.Load(), Panicked: c.panicked.Load(),
	}
}

// Fairness returns each lane's recent fairness figures, with up to top
// tenants each (≤ 0: all).
func (d *Drainer) Fairness(top int) []scheduler.GroupStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sched.Stats(d.cfg.Now(), top)
}

// Slots returns the number of delivery slots and how many are busy.
func (d *Drainer) Slots() (slots, busy int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sched.Slots(), d.sched.Running()
}

// Held returns the number of jobs read ahead and waiting for a slot.
func (d *Drainer) Held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sched.Held()
}

// job is a received message with its decoded envelope (nil if malformed).
type job struct {
	q        *queueBuf
	msg      queue.Message
	env      *envelope.Envelope
	bad      error     // why env is nil
	leasedAt time.Time // when its visibility was last set
}

func (d *Drainer) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// waitRoom blocks until the drainer may hold another batch from q: room
// in the read-ahead, and for a sideline queue room for sideline work.
func (d *Drainer) waitRoom(ctx context.Context, q *queueBuf) bool {
	for {
		d.mu.Lock()
		room := d.sched.Held()+queue.MaxBatch <= d.heldMax
		if q.source != sideliner.SourceShard {
			room = room && d.sched.HeldIn(scheduler.Spillover)+d.sched.HeldIn(scheduler.Backlog) < d.sideMax
		}
		if room {
			d.mu.Unlock()
			return true
		}
		d.roomWait = true
		ch := d.roomFreed
		d.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// freeRoomLocked wakes the pollers waiting for room; callers hold d.mu.
func (d *Drainer) freeRoomLocked() {
	if d.roomWait {
		close(d.roomFreed)
		d.roomFreed = make(chan struct{})
		d.roomWait = false
	}
}

func (d *Drainer) poll(ctx context.Context, q *queueBuf) {
	log := d.cfg.Logger.With(slog.String("queue", q.name))
	for {
		if !d.waitRoom(ctx, q) {
			return
		}
		// The lane's visibility timeout is the queue's default; passing it
		// lets the backend know the lease, so acks in time skip SQS's
		// fencing call.
		msgs, err := d.cfg.Backend.Receive(ctx, &queue.ReceiveParams{Queue: q.name, Max: queue.MaxBatch, Wait: d.cfg.PollWait,
			VisibilityTimeout: q.inbox.visibility})
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
		if len(msgs) > 0 {
			d.take(q, msgs)
		}
		if len(msgs) < queue.MaxBatch && d.cfg.ReceiveLinger > 0 && !periodic.Sleep(ctx, d.cfg.ReceiveLinger) {
			return
		}
	}
}

// take judges a received batch: the deliverable jobs are held for the
// scheduler; the others are moved, in one batch per destination, or
// handled one by one (drop, dead-letter, defer).
func (d *Drainer) take(q *queueBuf, msgs []queue.Message) {
	now := d.cfg.Now()
	in := q.inbox
	var spill, stale []*job
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
				tenant = ""
			}
			// Sideline jobs are always held: their pollers read only
			// while the sideline read-ahead has room.
			class := classOf(q.source)
			if (class != scheduler.Fresh || d.sched.HeldFresh(tenant) < d.freshBudget()) && d.sched.Push(now, tenant, in.lane.Name, class, j) {
				continue
			}
			// The tenant's read-ahead is full: let the others be seen.
			decision = in.policy.Decide(d.input(j, now, true))
			if decision.Action == sideliner.Spill {
				spill = append(spill, j)
				continue
			}
		case sideliner.Backlog:
			if d.sched.HeldIn(scheduler.Backlog) < d.staleMax && d.sched.Push(now, j.env.GetTenant(), in.lane.Name, scheduler.Backlog, j) {
				continue
			}
			stale = append(stale, j)
			continue
		}
		single = append(single, decided{j, decision})
	}
	d.mu.Unlock()
	d.signal()
	if len(spill) > 0 {
		d.moveBatch(spill, in.spillover, sideliner.Decision{Action: sideliner.Spill, Reason: sideliner.ReasonReadAheadFull})
	}
	if len(stale) > 0 {
		d.moveBatch(stale, in.backlog, sideliner.Decision{Action: sideliner.Backlog, Reason: sideliner.ReasonStale})
	}
	for _, s := range single {
		d.work.Add(1)
		d.moves <- struct{}{}
		go func() {
			defer d.work.Done()
			defer func() { <-d.moves }()
			d.carryOut(context.Background(), s.j, s.decision)
		}()
	}
}

// freshBudget is how many fresh jobs one tenant may hold now: its
// read-ahead, less when so many tenants hold jobs that their budgets would
// fill the read-ahead in all (at least a receive batch); callers hold d.mu.
func (d *Drainer) freshBudget() int {
	if d.cfg.Policy.NoSideline {
		return d.heldMax
	}
	return max(queue.MaxBatch, min(d.cfg.ReadAhead, d.heldMax/max(1, d.sched.Active())))
}

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

// dispatch hands every free slot the job the scheduler picks.
func (d *Drainer) dispatch(ctx context.Context) {
	var timer *time.Timer
	for {
		d.mu.Lock()
		tk, wait := d.sched.Next(d.cfg.Now())
		if tk != nil {
			d.freeRoomLocked()
		}
		d.mu.Unlock()
		if tk != nil {
			d.work.Add(1)
			go d.run(tk)
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

// run delivers a granted job, or drops it if it expired while held, and
// gives the slot back with the worker time it used.
func (d *Drainer) run(tk *scheduler.Ticket[*job]) {
	defer d.work.Done()
	j := tk.Item
	start := d.cfg.Now()
	if e := j.env.GetExpiresAt(); e != nil && !start.Before(e.AsTime()) {
		d.finish(tk, 0)
		d.carryOut(context.Background(), j, sideliner.Decision{Action: sideliner.Drop, Reason: sideliner.ReasonTTLExpired})
		return
	}
	d.deliver(j, func() { d.finish(tk, d.cfg.Now().Sub(start)) })
}

// finish returns tk's slot to the scheduler, charging used.
func (d *Drainer) finish(tk *scheduler.Ticket[*job], used time.Duration) {
	d.mu.Lock()
	d.sched.Done(d.cfg.Now(), tk, used)
	d.mu.Unlock()
	d.signal()
}

// handle calls the handler, turning a panic into a failed attempt.
func (d *Drainer) handle(ctx context.Context, job *Job, log *slog.Logger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			d.counts.panicked.Add(1)
			d.cfg.Metrics.Drain(job.Lane, metrics.ActionPanicked, "")
			log.ErrorContext(ctx, "handler panicked", slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
			err = &PanicError{Value: r}
		}
	}()
	return d.cfg.Handler.Handle(ctx, job)
}

// deliver runs j through the handler; done is called as soon as the
// handler returns, to free the delivery slot.
func (d *Drainer) deliver(j *job, done func()) {
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
	vis := j.q.inbox.visibility
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
	err := d.handle(ctx, &Job{
		ID: env.GetJobId(), Tenant: env.GetTenant(), Lane: env.GetLane(), Payload: env.GetPayload(),
		Attributes: env.GetAttributes(), Attempt: attempt, EnqueuedAt: env.GetEnqueuedAt().AsTime(),
		TraceContext: tracing.Inject(ctx),
	}, log)
	stopHeartbeat()
	cancel()
	done()
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

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

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
	res, err := d.cfg.Backend.Send(ctx, &queue.SendParams{Queue: dest, Entries: []queue.SendEntry{{ID: "0", Body: body, Delay: min(delay, queue.MaxDelay), GroupID: j.env.GetTenant()}}})
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

// moveBatch moves jobs, all read from one queue, to dest with one send
// and one delete per batch of queue.MaxBatch, on the move budget: the
// caller (a poller) waits for a place, so reading slows down to what can
// be moved rather than piling up held leases. Send-then-delete: a job
// whose send fails stays on its queue and comes back after its visibility
// timeout; a failed delete may leave a duplicate. Nothing is lost.
func (d *Drainer) moveBatch(jobs []*job, dest string, decision sideliner.Decision) {
	d.moves <- struct{}{}
	d.work.Add(1)
	go func() {
		defer d.work.Done()
		defer func() { <-d.moves }()
		for start := 0; start < len(jobs); start += queue.MaxBatch {
			d.moveChunk(jobs[start:min(start+queue.MaxBatch, len(jobs))], dest, decision)
		}
	}()
}

func (d *Drainer) moveChunk(jobs []*job, dest string, decision sideliner.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	src := jobs[0].q
	lane := src.inbox.lane.Name
	entries := make([]queue.SendEntry, 0, len(jobs))
	spans := make([]trace.Span, len(jobs))
	for i, j := range jobs {
		jctx, span := d.startSideline(ctx, j, decision)
		spanDestination(jctx, dest)
		spans[i] = span
		body := j.msg.Body
		if j.env != nil {
			b, err := envelope.Encode(j.env)
			if err != nil {
				d.jobLogger(j).ErrorContext(ctx, "encode envelope for move", slog.Any("error", err))
				continue
			}
			body = b
		}
		entries = append(entries, queue.SendEntry{ID: fmt.Sprint(i), Body: body, GroupID: j.env.GetTenant()})
	}
	defer func() {
		for _, s := range spans {
			s.End()
		}
	}()
	res, err := d.cfg.Backend.Send(ctx, &queue.SendParams{Queue: dest, Entries: entries})
	sent := map[string]bool{}
	if err == nil {
		for _, r := range res {
			if r.Err == nil {
				sent[r.ID] = true
			}
		}
	}
	var receipts []string
	for i, j := range jobs {
		if !sent[fmt.Sprint(i)] {
			failure := err
			if failure == nil {
				failure = errors.New("send refused")
				for _, r := range res {
					if r.ID == fmt.Sprint(i) && r.Err != nil {
						failure = r.Err
					}
				}
			}
			tracing.Fail(spans[i], failure)
			d.moveFailed(j)
			d.jobLogger(j).WarnContext(ctx, "move: send failed; the job stays on its queue", slog.String("to", dest), slog.Any("error", failure))
			continue
		}
		receipts = append(receipts, j.msg.ReceiptHandle)
	}
	if len(receipts) == 0 {
		return
	}
	if errs, err := d.cfg.Backend.Delete(ctx, &queue.DeleteParams{Queue: src.name, ReceiptHandles: receipts}); err != nil {
		d.cfg.Logger.WarnContext(ctx, "move: delete of the originals failed; duplicates may follow", slog.String("queue", src.name), slog.String("to", dest), slog.Int("jobs", len(receipts)), slog.Any("error", err))
	} else {
		for _, e := range errs {
			if e != nil {
				d.cfg.Logger.WarnContext(ctx, "move: delete of an original failed; a duplicate may follow", slog.String("queue", src.name), slog.String("to", dest), slog.Any("error", e))
			}
		}
	}
	counter, action := &d.counts.spilled, metrics.ActionSpilled
	if decision.Action == sideliner.Backlog {
		counter, action = &d.counts.backlogged, metrics.ActionBacklogged
	}
	counter.Add(int64(len(receipts)))
	for range receipts {
		d.cfg.Metrics.Drain(lane, action, string(decision.Reason))
	}
}

// releaseHeld makes the jobs that were read ahead but never started
// visible again, so another drainer takes them at once.
func (d *Drainer) releaseHeld() {
	d.mu.Lock()
	held := d.sched.RemoveIf(func(string, scheduler.Class, *job) bool { return true })
	d.freeRoomLocked()
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for q, receipts := range byQueue(held) {
		if err := queue.SetVisibility(ctx, d.cfg.Backend, q, receipts, 0); err != nil {
			d.cfg.Logger.Warn("release received jobs", slog.String("queue", q), slog.Int("jobs", len(receipts)), slog.Any("error", err))
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
	shortest := time.Duration(0)
	for _, in := range d.lanes {
		if shortest == 0 || in.visibility < shortest {
			shortest = in.visibility
		}
	}
	t := time.NewTicker(max(shortest/6, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := d.cfg.Now()
		var due []*job
		d.mu.Lock()
		d.sched.Each(func(_ string, _ scheduler.Class, j *job) {
			if now.Sub(j.leasedAt) > j.q.inbox.visibility/3 {
				due = append(due, j)
				j.leasedAt = now
			}
		})
		d.mu.Unlock()
		lost := d.renew(ctx, due)
		if len(lost) > 0 {
			d.mu.Lock()
			d.sched.RemoveIf(func(_ string, _ scheduler.Class, j *job) bool { return lost[j] })
			d.freeRoomLocked()
			d.mu.Unlock()
			d.cfg.Logger.WarnContext(ctx, "held jobs lost their lease while waiting; another consumer takes them", slog.Int("jobs", len(lost)))
		}
	}
}

// renew extends the leases of jobs, a batch per queue at a time, and
// returns those whose lease the backend says is gone.
func (d *Drainer) renew(ctx context.Context, jobs []*job) map[*job]bool {
	byQ := map[*queueBuf][]*job{}
	for _, j := range jobs {
		byQ[j.q] = append(byQ[j.q], j)
	}
	lost := map[*job]bool{}
	for q, js := range byQ {
		for start := 0; start < len(js); start += queue.MaxBatch {
			chunk := js[start:min(start+queue.MaxBatch, len(js))]
			changes := make([]queue.VisibilityChange, len(chunk))
			for i, j := range chunk {
				changes[i] = queue.VisibilityChange{ReceiptHandle: j.msg.ReceiptHandle, Timeout: q.inbox.visibility}
			}
			errs, err := d.cfg.Backend.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{Queue: q.name, Changes: changes})
			if err != nil {
				if ctx.Err() == nil {
					d.cfg.Logger.WarnContext(ctx, "renew held jobs' leases", slog.String("queue", q.name), slog.Int("jobs", len(chunk)), slog.Any("error", err))
				}
				continue
			}
			for i, e := range errs {
				if errors.Is(e, queue.ErrReceiptInvalid) {
					lost[chunk[i]] = true
				}
			}
		}
	}
	return lost
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
		case <-t.C:
		}
		now := d.cfg.Now()
		d.mu.Lock()
		d.sched.Refresh(now)
		if sweeps++; sweeps%30 == 0 {
			d.sched.Sweep(now)
		}
		stats := d.sched.Stats(now, fairnessTop)
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
