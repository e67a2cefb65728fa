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
// While a worker runs a job, one lease keeper extends the visibility of
// every job in delivery, in batches (heartbeat); the delivery then acks
// (delete), retries with exponential backoff through a delayed copy, or
// dead-letters. Held jobs have their visibility renewed while they wait.
// A handler that panics fails its attempt, with the stack in the log. A
// drainer that loses a lease cannot ack or extend the message any more
// (the backend refuses its receipt).
package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/internal/ratelog"
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
	// probeEvery is how often a shard poller paced by the budgets reads
	// a batch anyway, to look past the full tenants (waitRoom).
	probeEvery = 100 * time.Millisecond
	// statsInterval is how often the fairness gauges are refreshed.
	statsInterval = 2 * time.Second
)

// countedActions are the drain actions and reasons whose series start at
// 0 in each lane (metrics.DrainSeries): those an operator alerts or
// graphs a rate on.
var countedActions = [][2]string{
	{metrics.ActionDelivered, ""},
	{metrics.ActionRetried, string(sideliner.ReasonRetryableFailure)},
	{metrics.ActionDeadLettered, string(sideliner.ReasonAttemptsExhausted)},
	{metrics.ActionDeadLettered, string(sideliner.ReasonPermanentFailure)},
	{metrics.ActionDeadLettered, string(sideliner.ReasonPanic)},
	{metrics.ActionDeadLettered, string(sideliner.ReasonMalformed)},
	{metrics.ActionLeaseLost, ""},
	{metrics.ActionMoveFailed, ""},
	{metrics.ActionPanicked, ""},
	{metrics.ActionReleased, ""},
}

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
	// limits; unused with Policy.NoSideline.
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
	// ReadAhead, when set, is the most fresh jobs of one tenant held in
	// memory waiting for a slot. Without it a tenant may hold an equal
	// share, among the tenants holding jobs, of the fresh read-ahead: the
	// read-ahead in all (max(1,024, 16 × Concurrency) jobs) less the
	// sideline read-ahead. Beyond either, a tenant's fresh jobs are moved
	// to the spillover queue while some tenant read from the same shard
	// is quiet (sideliner.Lookout) and held otherwise (waitRoom); beyond
	// only the share, they are held while the fresh read-ahead has room.
	// Defaults to 0.
	ReadAhead int
	// StaleReadAhead is the most stale (backlog) jobs, and separately the
	// most spillover and backlog-queue jobs, held in memory waiting for a
	// slot; stale jobs read beyond it are moved to the backlog queue.
	// Defaults to max(2 × Concurrency, a quarter of the read-ahead in all).
	StaleReadAhead int
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
	// stored in each envelope. Defaults to the global provider as New
	// finds it: set tracing up (internal/tracing) before New, or no span
	// is made; the worker gets the stored trace context either way.
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
	Released     int64 // deliveries handed back unanswered (a pull worker went away): redelivered at once
}

// Drainer delivers jobs from a topology's queues to a Handler.
type Drainer struct {
	cfg    Config
	lanes  []*laneInbox
	tracer trace.Tracer

	mu        sync.Mutex // guards sched and the fields below
	sched     *scheduler.Scheduler[*job]
	receivers int           // receive loops, each holding up to a batch
	heldMax   int           // most jobs held in all (sizeReadAhead)
	staleMax  int           // most stale jobs held rather than moved
	sideMax   int           // most spillover/backlog jobs held
	roomFreed chan struct{} // closed and replaced when held jobs leave and a poller waits
	roomWait  bool          // a poller waits on roomFreed
	overCap   bool          // the slots last offered (SetCapacity) were over Config.Concurrency

	leaseMu    sync.Mutex
	delivering map[*job]struct{} // jobs in delivery, whose leases keepLeases extends

	wake chan struct{} // signalled when the dispatcher may have work
	// releaseNow asks renewHeld to hand back the held jobs of lanes that
	// lost their slots (SetCapacity).
	releaseNow chan struct{}
	moves      chan struct{}                // one token per running move
	runs       chan *scheduler.Ticket[*job] // granted jobs, to a runner waiting for one (unbuffered)

	pollCancel     context.CancelFunc
	dispatchCancel context.CancelFunc
	handlerCancel  context.CancelFunc
	handlerCtx     context.Context // handlers, acks, moves, hand-backs: ends with Stop's context
	pollers        sync.WaitGroup
	leaseKeeper    sync.WaitGroup
	dispatcher     sync.WaitGroup
	work           sync.WaitGroup // runners (deliveries and their acks) and moves
	started        atomic.Bool
	stopOnce       sync.Once
	stopErr        error

	// deleteFailed bounds the "delete after delivery failed" lines: on
	// a full or read-only disk every delivered job logged one, on what
	// is often the same disk (found by a tester).
	deleteFailed ratelog.Line

	counts struct {
		delivered, retried, spilled, backlogged, dropped, deadLettered,
		deferred, requeued, leaseLost, moveFailed, panicked, released atomic.Int64
	}
}

type laneInbox struct {
	lane topology.Lane
	// closed: no slot can serve the lane (no pull worker does); its
	// queues are not read and its held jobs are handed back. Guarded by
	// Drainer.mu.
	closed     bool
	policy     sideliner.Policy
	visibility time.Duration
	shards     []*queueBuf
	side       []*queueBuf // spillover, backlog
	spillover  string
	backlog    string
	dlq        string
	// series records the lane's per-job metrics, found once.
	series *metrics.LaneSeries
}

// queueBuf is one queue the drainer reads.
type queueBuf struct {
	inbox  *laneInbox
	name   string
	source sideliner.Source
	acks   acker // deletes of the jobs delivered from it
	// lookout: whether reading past this shard's full tenants can find a
	// quiet tenant's job (guarded by Drainer.mu).
	lookout sideliner.Lookout
	// staleAt is when a read of this shard's head last found jobs past
	// the staleness bound (unix nanoseconds; poll), shared by its
	// pollers.
	staleAt atomic.Int64
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
	if cfg.Concurrency < 1 || cfg.ReadAhead < 0 || cfg.StaleReadAhead < 0 {
		return nil, errors.New("drainer: concurrency must be at least 1 and read-aheads not negative")
	}
	cfg.PollWait = cmp.Or(cfg.PollWait, PollWaitDefault)
	cfg.HandlerTimeout = cmp.Or(cfg.HandlerTimeout, HandlerTimeoutDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Limits == nil || cfg.Policy.NoSideline {
		// A plain FIFO holds each lane's jobs as one pseudo-tenant's
		// (fifoKey), whose limits would be a tier's: no tenant's limits
		// apply to it.
		cfg.Limits = func(string) scheduler.Limits { return scheduler.Limits{} }
	}
	d := &Drainer{
		cfg: cfg, tracer: tracing.Tracer(cfg.TracerProvider),
		delivering: map[*job]struct{}{},
		wake:       make(chan struct{}, 1),
		releaseNow: make(chan struct{}, 1),
		roomFreed:  make(chan struct{}),
		moves:      make(chan struct{}, max(cfg.Concurrency, movesMin)),
		runs:       make(chan *scheduler.Ticket[*job]),
	}
	d.deleteFailed.Now = cfg.Now
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
			series:    cfg.Metrics.Lane(l.Name),
		}
		for s := range l.Shards + l.RetiredShards { // retired: jobs left in shards a lane no longer has
			in.shards = append(in.shards, &queueBuf{inbox: in, name: cfg.Topology.ShardQueue(l.Name, s), source: sideliner.SourceShard})
		}
		in.side = []*queueBuf{
			{inbox: in, name: in.spillover, source: sideliner.SourceSpillover},
			{inbox: in, name: in.backlog, source: sideliner.SourceBacklog},
		}
		for _, qs := range [][]*queueBuf{in.shards, in.side} {
			for _, q := range qs {
				q.acks.acked = d.acked
			}
		}
		d.lanes = append(d.lanes, in)
	}
	// Read ahead enough for many tenants' budgets and a batch from every
	// poller.
	pollers := 0
	for _, in := range d.lanes {
		pollers += bufferBatches*len(in.shards) + len(in.side)
	}
	d.receivers = pollers
	d.sizeReadAhead(cfg.Concurrency)
	// The scheduler's per-tenant bound is only a backstop: freshBudget
	// shares the read-ahead. In a plain FIFO (--sideline=false, the
	// benchmarks' baseline) every job is held as one tenant's, in the
	// order read, and nothing is moved aside.
	readAhead := d.heldMax + pollers*queue.MaxBatch
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

// sizeReadAhead bounds the jobs held for the delivery slots there are;
// callers hold d.mu, or own d.
//
// The read-ahead in all is bounded for memory and lease renewals, not to
// ration tenants: when many tenants hold jobs, each one's budget shrinks
// (freshBudget) rather than the pollers stopping, so a quiet tenant's job
// behind many floods is still read. It follows the slots, so that a
// drainer with few pull workers does not hold, out of sight of the other
// drainers of a fleet, jobs read for the Concurrency it may never have.
//
// Stale and sideline jobs wait in memory up to a quarter of the
// read-ahead: enough to keep every slot busy from memory while the
// pollers look for fresh work, so that under a backlog the workers do
// not wait on moves; only what is read beyond it is moved aside.
func (d *Drainer) sizeReadAhead(slots int) {
	slots = max(slots, 1)
	d.heldMax = max(16*slots, 1024) + d.receivers*queue.MaxBatch
	d.staleMax = cmp.Or(d.cfg.StaleReadAhead, max(2*slots, d.heldMax/4))
	d.sideMax = d.staleMax
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
	context.AfterFunc(d.handlerCtx, d.cancelDeliveries)
	for _, in := range d.lanes {
		d.cfg.Metrics.DrainSeries(in.lane.Name, countedActions)
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
	// Deliveries still running while Stop waits keep their leases.
	d.leaseKeeper.Go(func() { d.keepLeases(d.handlerCtx) })
	d.pollers.Go(func() { d.housekeep(pollCtx) })
	return nil
}

// Stop stops polling, hands back jobs received but not started (visibility
// 0), and waits for running deliveries, acks and moves, until ctx ends;
// jobs not handed back by then, and those of deliveries, acks and moves
// still running, which are cancelled, come back after their visibility
// timeout. Safe to call twice or without Start.
func (d *Drainer) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() {
		if d.started.CompareAndSwap(false, true) {
			return // never started; a later Start fails
		}
		// Past ctx, the deliveries, acks and moves still running are
		// cancelled wherever Stop waits, not only for the deliveries:
		// each backend call had opTimeout (30s) of its own, and with the
		// backend unreachable Stop overran ctx by that much.
		interrupt := context.AfterFunc(ctx, d.handlerCancel)
		d.pollCancel()
		d.pollers.Wait()
		d.dispatchCancel()
		d.dispatcher.Wait()
		d.releaseHeld(ctx)
		d.work.Wait() // past ctx, the AfterFunc has cancelled what runs
		// Judged by the AfterFunc, not by which of the work's end and
		// ctx's a select saw first: the deliveries it cancels end at once,
		// and a select finding both ready reported a cut-short Stop as
		// clean (TestStopIsBoundedByItsContext failed so, rarely).
		if !interrupt() {
			d.stopErr = fmt.Errorf("drainer: stop: deliveries still running at deadline: %w", context.Cause(ctx))
		}
		d.handlerCancel()
		d.leaseKeeper.Wait()
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
		MoveFailed: c.moveFailed.Load(), Panicked: c.panicked.Load(), Released: c.released.Load(),
	}
}

// Fairness returns each lane's recent fairness figures, with up to top
// tenants each (≤ 0: all).
func (d *Drainer) Fairness(top int) []scheduler.GroupStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.statsLocked(d.cfg.Now(), top)
}

// statsLocked is the scheduler's Stats, with a plain FIFO's per-lane
// keys shown as no tenant (""); callers hold d.mu.
func (d *Drainer) statsLocked(now time.Time, top int) []scheduler.GroupStats {
	stats := d.sched.Stats(now, top)
	if d.cfg.Policy.NoSideline {
		for _, g := range stats {
			for i := range g.Tenants {
				g.Tenants[i].Tenant = ""
			}
		}
	}
	return stats
}

// SetCapacity sets the delivery slots to slots, within Config.Concurrency
// (the ceiling), and when lanes is not nil each lane's slots to lanes[lane]
// (missing: none): the credits of the pull workers connected, in all and
// of those serving each lane. Running deliveries keep their slots.
//
// A lane left with no slot is closed: its queues are not read, and the
// jobs read ahead for it are handed back (visibility 0) so that a drainer
// whose workers serve it takes them.
//
// Slots offered over the ceiling are logged as a warning when they first
// are, and again each time they come back over it after falling within.
func (d *Drainer) SetCapacity(slots int, lanes map[string]int) {
	d.mu.Lock()
	over := slots > d.cfg.Concurrency
	warn := over && !d.overCap
	d.overCap = over
	d.sched.SetSlots(min(slots, d.cfg.Concurrency))
	d.sizeReadAhead(min(slots, d.cfg.Concurrency))
	closing := false
	for _, in := range d.lanes {
		n := -1
		if lanes != nil {
			n = lanes[in.lane.Name]
		}
		d.sched.SetGroupSlots(in.lane.Name, n)
		closed := slots <= 0 || n == 0
		closing = closing || (closed && !in.closed)
		in.closed = closed
	}
	d.freeRoomLocked() // pollers of a lane that reopened
	d.mu.Unlock()
	if warn {
		d.cfg.Logger.Warn("pull workers grant more credits than the delivery ceiling: the credits over it go unused, "+
			"and the jobs of a worker that stops answering hold slots of the others until their leases time out; raise the ceiling (--concurrency, Config.Concurrency) above the credits granted in all",
			slog.Int("credits", slots), slog.Int("concurrency", d.cfg.Concurrency))
	}
	if closing {
		select {
		case d.releaseNow <- struct{}{}:
		default:
		}
	}
	d.signal()
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
