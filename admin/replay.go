package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/topology"
)

// Replay limits.
const (
	ReplayRateDefault = 100.0
	ReplayRateMax     = 10_000.0
	maxReplaysKept    = 100
)

// replayer runs DLQ replays and keeps their progress.
type replayer struct {
	backend queue.Backend
	topo    topology.Topology
	log     *slog.Logger
	gate    *scanGate // one scan of a DLQ at a time in this process
	// scanLimit bounds the messages one scan holds at once: maxScan,
	// lower in tests.
	scanLimit int

	mu      sync.Mutex
	runs    map[string]*replayRun
	order   []string // ids, oldest first
	wg      sync.WaitGroup
	started bool
	stopped bool // no replay starts any more

	stopOnce sync.Once
	stopErr  error
}

// errStopping refuses a replay while the admin API stops.
var errStopping = errors.New("the admin API is stopping")

type replayRun struct {
	mu     sync.Mutex
	pb     *adminv1.Replay
	cancel context.CancelFunc
	done   chan struct{} // closed when the run has settled
}

func (r *replayRun) snapshot() *adminv1.Replay {
	r.mu.Lock()
	defer r.mu.Unlock()
	return proto.CloneOf(r.pb)
}

func (r *replayRun) update(f func(pb *adminv1.Replay)) {
	r.mu.Lock()
	f(r.pb)
	r.mu.Unlock()
}

func newReplayer(backend queue.Backend, topo topology.Topology, log *slog.Logger) *replayer {
	return &replayer{backend: backend, topo: topo, log: log, gate: newScanGate(), scanLimit: maxScan, runs: map[string]*replayRun{}}
}

// start begins a replay. A dry run completes before start returns.
func (p *replayer) start(ctx context.Context, req *adminv1.ReplayDLQRequest) (*adminv1.Replay, error) {
	f := req.GetFilter()
	queues, order, err := dlqQueues(p.topo, f)
	if err != nil {
		return nil, err
	}
	rps := req.GetRatePerSecond()
	if rps == 0 {
		rps = ReplayRateDefault
	}
	run := &replayRun{pb: &adminv1.Replay{
		Id:            ulid.Make().String(),
		State:         adminv1.Replay_STATE_RUNNING,
		Filter:        f,
		DryRun:        req.GetDryRun(),
		MaxJobs:       req.GetMaxJobs(),
		RatePerSecond: rps,
		StartedAt:     timestamppb.Now(),
	}, done: make(chan struct{})}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	run.cancel = cancel
	if req.GetDryRun() {
		// A dry run waits for a list or another dry run, and is refused
		// while a replay holds the DLQs' jobs: it would under-count.
		leave, err := p.gate.enter(ctx, order, scanHolder{replayID: run.pb.GetId()})
		if err != nil {
			cancel()
			return nil, err
		}
		if err := p.remember(run); err != nil {
			leave()
			cancel()
			return nil, err
		}
		defer p.wg.Done()
		p.run(runCtx, run, queues, order, leave)
		cancel()
		return run.snapshot(), nil
	}
	if err := p.remember(run); err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer p.wg.Done()
		defer cancel()
		// A replay waits until no other scan of this process reads its
		// DLQs (it would miss what they hold), cancellable meanwhile.
		leave, err := p.gate.enter(runCtx, order, scanHolder{replayID: run.pb.GetId(), long: true})
		if err != nil {
			p.finish(runCtx, run, err)
			return
		}
		p.run(runCtx, run, queues, order, leave)
	}()
	return run.snapshot(), nil
}

// remember records a run about to start, and counts it in p.wg, unless
// the replayer is stopping.
func (p *replayer) remember(run *replayRun) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errStopping
	}
	p.wg.Add(1)
	p.runs[run.pb.GetId()] = run
	p.order = append(p.order, run.pb.GetId())
	for len(p.order) > maxReplaysKept {
		old := p.runs[p.order[0]]
		if old.snapshot().GetState() == adminv1.Replay_STATE_RUNNING {
			break
		}
		delete(p.runs, p.order[0])
		p.order = p.order[1:]
	}
	return nil
}

// run scans and moves; leave (the scan gate's) is called once the scan
// has handed back what it held, before the run is reported settled.
func (p *replayer) run(ctx context.Context, run *replayRun, queues map[string]string, order []string, leave func()) {
	pb := run.snapshot()
	f, dry, maxJobs := pb.GetFilter(), pb.GetDryRun(), pb.GetMaxJobs()
	lim := rate.NewLimiter(rate.Limit(pb.GetRatePerSecond()), 1)
	scan := newDLQScan(p.backend, p.log, p.scanLimit)
	var taken int64
	// A moved job that fails again lands back in the DLQ while the scan
	// runs: it is a new message, but not one to move again.
	moved := map[string]bool{}
	err := scan.each(ctx, queues, order, func(m *dlqMessage) (bool, error) {
		if !matches(f, m) || (m.env != nil && moved[m.env.GetJobId()]) {
			run.update(func(pb *adminv1.Replay) { pb.Scanned++; pb.Skipped++ })
			return true, nil
		}
		taken++
		run.update(func(pb *adminv1.Replay) { pb.Scanned++; pb.Matched++ })
		// At its max the replay ends: it read on through the rest of
		// the DLQ for one more job, holding all it read.
		more := maxJobs == 0 || taken < maxJobs
		// Decided before the dry run returns, so that it counts what the
		// replay would: a dry run counted a malformed body as one to
		// move, which the replay then failed (found in review).
		if err := replayable(m); err != nil {
			p.log.WarnContext(ctx, "replay: job stays in the DLQ", slog.Bool("dry_run", dry), slog.String("queue", m.queue), slog.String("message_id", m.msg.MessageID), slog.Any("error", err))
			run.update(func(pb *adminv1.Replay) { pb.Failed++; pb.Malformed++ })
			return more, nil
		}
		if dry {
			return more, nil
		}
		if err := lim.Wait(ctx); err != nil {
			return false, err
		}
		if err := p.moveBackTraced(ctx, pb.GetId(), m); err != nil {
			p.log.WarnContext(ctx, "replay: job stays in the DLQ", slog.String("queue", m.queue), slog.String("message_id", m.msg.MessageID), slog.Any("error", err))
			run.update(func(pb *adminv1.Replay) { pb.Failed++ })
			return more, nil
		}
		scan.forget(m.queue, m.msg.ReceiptHandle)
		moved[m.env.GetJobId()] = true
		run.update(func(pb *adminv1.Replay) { pb.Moved++ })
		return more, nil
	})
	scan.release()
	leave()
	p.finish(ctx, run, err)
}

// finish records how a run ended and marks it settled.
func (p *replayer) finish(ctx context.Context, run *replayRun, err error) {
	run.update(func(pb *adminv1.Replay) {
		pb.FinishedAt = timestamppb.Now()
		switch {
		case errors.Is(err, context.Canceled):
			pb.State = adminv1.Replay_STATE_CANCELLED
		case err != nil:
			pb.State, pb.Error = adminv1.Replay_STATE_FAILED, err.Error()
		default:
			pb.State = adminv1.Replay_STATE_DONE
		}
	})
	close(run.done)
	final := run.snapshot()
	p.log.InfoContext(ctx, "replay finished", slog.String("replay_id", final.GetId()), slog.String("state", final.GetState().String()),
		slog.Bool("dry_run", final.GetDryRun()), slog.Int64("matched", final.GetMatched()), slog.Int64("moved", final.GetMoved()), slog.Int64("failed", final.GetFailed()))
}

// replayable reports why a DLQ message can never be moved back: a body
// that is not an envelope. The dry run and the replay both ask it.
func replayable(m *dlqMessage) error {
	if m.env == nil {
		return fmt.Errorf("malformed envelope cannot be replayed: %w", m.bad)
	}
	return nil
}

// moveBack moves a dead-lettered job to its tenant's shard with a fresh
// attempt count (queue.Relocate: one step on the embedded store; on SQS
// send, then delete from the DLQ, so a duplicate is possible if the
// delete fails, a loss is not).
func (p *replayer) moveBack(ctx context.Context, m *dlqMessage) error {
	if err := replayable(m); err != nil {
		return err
	}
	env := proto.CloneOf(m.env)
	lane, ok := p.topo.Lane(env.GetLane())
	if !ok {
		lane, _ = p.topo.Lane(m.lane)
	}
	env.Lane = lane.Name
	env.Attempts = 0
	env.FirstAttemptAt = nil
	env.DeadLetterReason = ""
	// Its first attempt after the replay is timed from the replay: from
	// enqueued_at, a replay of an old job paged the first-attempt-age
	// alarm (found in review).
	env.ReplayedAt = timestamppb.Now()
	body, err := envelope.Encode(env)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	dest := p.topo.ShardQueue(lane.Name, int(env.GetShard())%lane.Shards)
	spanDestination(ctx, dest)
	// The tenant as the group, as the gateway sends it: on SQS fair
	// queues a large replay for one tenant does not hold up the others.
	entry := queue.SendEntry{ID: "0", Body: body, GroupID: env.GetTenant()}
	// A move that has begun finishes: a cancel (CancelReplay, Stop)
	// that reached the delete after the send left the job on its shard
	// and in the DLQ, to be replayed again (found in review). The cancel
	// stops the replay before its next job instead.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	res, deleteErr, err := queue.Relocate(mctx, p.backend, m.queue, dest, []queue.SendEntry{entry}, []string{m.msg.ReceiptHandle})
	if err == nil && len(res) > 0 {
		err = res[0].Err
	}
	if err != nil {
		return fmt.Errorf("send to %s: %w", dest, err)
	}
	if deleteErr != nil {
		p.log.WarnContext(ctx, "replay: sent but not removed from the DLQ; it may be replayed again", slog.String("job_id", env.GetJobId()), slog.Any("error", deleteErr))
	}
	return nil
}

func (p *replayer) get(id string) (*adminv1.Replay, bool) {
	p.mu.Lock()
	run := p.runs[id]
	p.mu.Unlock()
	if run == nil {
		return nil, false
	}
	return run.snapshot(), true
}

func (p *replayer) list() []*adminv1.Replay {
	p.mu.Lock()
	ids := slices.Clone(p.order)
	p.mu.Unlock()
	out := make([]*adminv1.Replay, 0, len(ids))
	for _, id := range slices.Backward(ids) {
		if r, ok := p.get(id); ok {
			out = append(out, r)
		}
	}
	return out
}

// cancelRun stops a replay and waits for it to settle.
func (p *replayer) cancelRun(id string) (*adminv1.Replay, bool) {
	p.mu.Lock()
	run := p.runs[id]
	p.mu.Unlock()
	if run == nil {
		return nil, false
	}
	run.cancel()
	select {
	case <-run.done:
	case <-time.After(opTimeout):
	}
	return run.snapshot(), true
}

// open is Start's: the replayer needs no goroutine until a replay.
func (p *replayer) open() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopped:
		return startstop.ErrStopped
	case p.started:
		return startstop.ErrStarted
	}
	p.started = true
	return nil
}

// stop refuses new replays, cancels running ones and waits for them to
// settle until ctx ends.
func (p *replayer) stop(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.stopped = true
		for _, run := range p.runs {
			run.cancel()
		}
		p.mu.Unlock()
		settled := make(chan struct{})
		go func() { p.wg.Wait(); close(settled) }()
		select {
		case <-settled:
		case <-ctx.Done():
			p.stopErr = fmt.Errorf("admin: stop: replays still handing back their messages: %w", ctx.Err())
		}
	})
	return p.stopErr
}
