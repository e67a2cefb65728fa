// Package pull serves sluice.worker.v1.PullService: workers dial sluice,
// open one Connect stream each, name the lanes they serve and grant
// credits (the most jobs they run at once), and are handed jobs over the
// stream.
//
// The Hub is the drainer's Handler in pull mode. The drainer's fair
// scheduler decides which job runs next, exactly as for pushed deliveries;
// the hub only places each granted job on a connected worker serving its
// lane with a free credit, and waits for the worker's answer. Its credits
// are the drainer's capacity: whenever they change, Config.Capacity is
// told the credits in all and per lane, so no slot is granted that no
// worker can take.
//
// While a job is out, the drainer keeps its message invisible (the
// drainer's lease keeper). When a stream ends, for any reason, the hub hands
// every job it had sent on it back with worker.ErrReleased and the drainer
// makes it visible at once, so another worker gets it without waiting out
// the visibility timeout. A job placed on the stream and not yet sent goes
// straight to another worker with a free credit, and back to the drainer
// only if there is none. Each job carries a lease token that is good only on
// its stream and only until answered: an answer with a stale or unknown
// lease is refused (Refused, NOT_FOUND) and changes nothing.
//
// A worker that stops reading holds only its own credits: a job goes to a
// worker whose send is under way only when no other has a free credit,
// the unsent jobs of one whose send is blocked move to other workers as
// their credits free (checked every sweep, 250 ms) and are all taken
// back after StallTimeout, and it gets no new ones until its stream moves
// again, so the other workers are not slowed.
//
// worker.Connect pings its connection after 30s without traffic, to find
// a lost host: a gRPC server serving the hub must allow that
// (keepalive.EnforcementPolicy with MinTime of 30s or less, as
// cmd/gateway's and cmd/drainer's worker listener has), or it closes the
// connections of idle workers, and of busy ones that are quiet, which
// hands their jobs back.
package pull

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/worker"
)

// Limits and defaults.
const (
	// MaxCredits is the most credits one worker may grant.
	MaxCredits = 10000
	// LeaseTimeoutDefault is how long a job may go unanswered, with no
	// extend, before its attempt fails.
	LeaseTimeoutDefault = 15 * time.Minute
	// MaxLeaseTimeout bounds Hello.lease_timeout and extends. The drainer
	// in pull mode gives deliveries at least this long.
	MaxLeaseTimeout = 12 * time.Hour
	// StallTimeoutDefault is how long a send to a worker may block before
	// the worker counts as stalled.
	StallTimeoutDefault = 10 * time.Second
	// maxBatchBytes bounds one Jobs message (workers accept 16 MiB).
	maxBatchBytes = 1 << 20
	// maxRefusalsQueued bounds refusals waiting to be sent; beyond it the
	// worker's messages are read no faster than refusals are sent.
	maxRefusalsQueued = 1024
	// creditWait is how long a granted job waits for a free credit on its
	// lane (placing races a worker's credits shrinking) before it is
	// handed back.
	creditWait = time.Second
	// helloTimeout is how long a stream may go without its first
	// message, the Hello, before it is ended.
	helloTimeout = 10 * time.Second
	// sweepInterval is how often leases, stalls and keys are checked.
	sweepInterval = 250 * time.Millisecond
)

// Config configures a Hub.
type Config struct {
	// Authenticate returns the worker credential owning a key. Required.
	Authenticate func(key string) (*tenant.Worker, bool)
	// KeysVersion, if set, returns the tenant file's version in use: a
	// new one after each reload. A job placed after a reload is placed
	// only once every session's key was checked again, so a revoked or
	// narrowed key gets no job after the reload; without it, keys are
	// checked by the sweep alone (every 250 ms).
	KeysVersion func() *tenant.Version
	// Lanes are the lanes this process drains. Required.
	Lanes []string
	// Capacity is told the credits of the connected workers, in all and
	// per lane, whenever they change (drainer.SetCapacity). Required.
	Capacity func(slots int, lanes map[string]int)
	// LeaseTimeout is the default time a job may go unanswered. Defaults
	// to LeaseTimeoutDefault.
	LeaseTimeout time.Duration
	// StallTimeout is how long a blocked send to a worker is borne before
	// its unsent jobs are handed back. Defaults to StallTimeoutDefault.
	StallTimeout time.Duration
	// Metrics records workers, credits and released leases; nil records
	// nothing.
	Metrics *metrics.Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Hub places jobs on connected workers. It implements drainer.Handler
// (Handle) and workerv1.PullServiceServer (Connect).
type Hub struct {
	workerv1.UnimplementedPullServiceServer
	cfg Config

	mu       sync.Mutex
	sessions []*session
	closed   bool
	freed    chan struct{} // closed and replaced when a credit frees
	waiters  atomic.Int32  // deliveries waiting on freed
	stop     chan struct{}
	sweeper  sync.WaitGroup
	stopOnce sync.Once

	keysMu      sync.Mutex                     // one key check at a time
	keysChecked atomic.Pointer[tenant.Version] // the version the last check saw
}

// New validates cfg and returns a Hub; Start runs its sweeper.
func New(cfg Config) (*Hub, error) {
	if cfg.Authenticate == nil || cfg.Capacity == nil || len(cfg.Lanes) == 0 {
		return nil, errors.New("pull: Authenticate, Capacity and Lanes are required")
	}
	cfg.LeaseTimeout = cmp.Or(cfg.LeaseTimeout, LeaseTimeoutDefault)
	if cfg.LeaseTimeout < 0 || cfg.LeaseTimeout > MaxLeaseTimeout {
		return nil, errors.New("pull: LeaseTimeout must be positive and at most 12h")
	}
	cfg.StallTimeout = cmp.Or(cfg.StallTimeout, StallTimeoutDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Hub{cfg: cfg, freed: make(chan struct{}), stop: make(chan struct{})}, nil
}

// Start reports no capacity yet and runs the sweeper (lease deadlines,
// stalled sends, revoked keys) until Stop.
func (h *Hub) Start(context.Context) error {
	for _, lane := range h.cfg.Lanes {
		h.cfg.Metrics.PullReleased(lane, 0) // the series starts at 0: its first release is an increase
	}
	h.mu.Lock()
	h.capacityLocked()
	h.mu.Unlock()
	h.sweeper.Go(h.sweep)
	return nil
}

// Stop ends every session; the jobs they hold, and those waiting for a
// credit, are handed back. Safe to call twice or without Start.
func (h *Hub) Stop(context.Context) error {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		h.creditFreedLocked() // the deliveries waiting for a credit find the hub closed
		all := slices.Clone(h.sessions)
		h.mu.Unlock()
		for _, s := range all {
			s.end(errHubStopped)
		}
		close(h.stop)
		h.sweeper.Wait()
	})
	return nil
}

// Workers returns the number of connected workers.
func (h *Hub) Workers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Handle places job on a worker serving its lane and waits for the
// answer: nil (ack), a retryable or permanent error, or
// worker.ErrReleased when the worker went away first (or no worker could
// take it). A job taken back before it was sent (its worker went away,
// stalled or lowered its credits, or another worker freed a credit while
// its send was blocked: moveUnsent) is placed again at once on a worker
// with a free credit, and handed back only if there is none.
func (h *Hub) Handle(ctx context.Context, job *worker.Job) error {
	// The job message and its timestamp are fields of the delivery: one
	// allocation for the three.
	d := &delivery{lane: job.Lane, result: make(chan error, 1)}
	d.enqueuedAt.Seconds, d.enqueuedAt.Nanos = job.EnqueuedAt.Unix(), int32(job.EnqueuedAt.Nanosecond())
	m := &d.msg
	m.JobId, m.Tenant, m.Lane, m.Attempt = job.ID, job.Tenant, job.Lane, uint32(job.Attempt)
	m.Payload, m.Attributes, m.EnqueuedAt, m.TraceContext = job.Payload, job.Attributes, &d.enqueuedAt, job.TraceContext
	d.job = m
	s, err := h.place(ctx, d, true)
	for {
		if err != nil {
			return err
		}
		select {
		case err := <-d.result:
			if !errors.Is(err, errUnsent) {
				return err
			}
		case <-ctx.Done():
			if !s.forget(d) {
				// Answered meanwhile, or taken back unsent, which
				// needs no answer now.
				if err := <-d.result; !errors.Is(err, errUnsent) {
					return err
				}
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ctx.Err() // the drainer's handler timeout: a failed attempt
			}
			// The drainer is stopping, or lost the lease: nothing was
			// answered, so no attempt is counted.
			return worker.ErrReleased
		}
		// Taken back unsent: no worker has seen the job. Handed back to
		// the drainer, it went through its queue again (a receive more,
		// towards max_receive_count) to reach the workers with credits.
		if s, err = h.place(ctx, d, false); err != nil {
			h.cfg.Metrics.PullReleased(d.lane, 1)
		}
	}
}

// place puts d on a session with a free credit on d's lane, the best
// by rank.better, waiting up to creditWait for one if wait is set.
func (h *Hub) place(ctx context.Context, d *delivery, wait bool) (*session, error) {
	var deadline *time.Timer // started at the first wait
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for {
		if h.keysChanged() {
			h.checkKeys()
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, worker.ErrReleased
		}
		// Counted as waiting before looking: wakePlacers reads the count
		// without the lock, right after a credit is freed under the
		// session's lock alone, so a credit freed after this look finds
		// the count up and wakes us. Counted after the look, a credit
		// freed in between woke no one, and this delivery waited out
		// creditWait.
		h.waiters.Add(1)
		now := h.cfg.Now()
		var best *session
		var bestRank rank
		for _, s := range h.sessions {
			r := s.offer(d.lane, now)
			if r.free > 0 && (best == nil || r.better(bestRank)) {
				best, bestRank = s, r
			}
		}
		if best != nil {
			placed := best.assign(d, now)
			h.waiters.Add(-1)
			h.mu.Unlock()
			if placed {
				return best, nil
			}
			// best lost its free credits since the look (its worker
			// lowered them, or its stream ended): look again at once.
			// Waiting, the delivery waited for a credit to free, which
			// neither of those signals, while another session may have
			// one free: it waited for the sweep, or out creditWait, and
			// was handed back (found in review).
			continue
		}
		freed := h.freed
		h.mu.Unlock()
		if !wait {
			h.waiters.Add(-1)
			return nil, worker.ErrReleased
		}
		if deadline == nil {
			deadline = time.NewTimer(creditWait)
		}
		select {
		case <-freed:
			h.waiters.Add(-1)
		case <-deadline.C:
			h.waiters.Add(-1)
			return nil, worker.ErrReleased
		case <-ctx.Done():
			h.waiters.Add(-1)
			return nil, worker.ErrReleased
		}
	}
}

// rank is what place weighs of a session for a job: see better.
type rank struct {
	free    int  // credits free for the job's lane
	sending bool // a send to the worker is under way
	lanes   int  // the lanes the session serves
}

// better reports whether a session ranked r goes before one ranked o:
//   - one with no send under way first: a job placed behind a send waits
//     for it, and behind a worker that stopped reading, for the stall
//     timeout;
//   - then the one serving the fewest lanes: a credit of a worker of
//     several lanes is counted in the drainer's slots of each, so a job
//     that takes it where a worker of fewer lanes had one free can leave
//     a job of another lane, granted that credit, none to take (it waited
//     out creditWait and was handed back);
//   - then the most free credits.
func (r rank) better(o rank) bool {
	switch {
	case r.sending != o.sending:
		return !r.sending
	case r.lanes != o.lanes:
		return r.lanes < o.lanes
	}
	return r.free > o.free
}

// wakePlacers wakes deliveries waiting for a credit, if any.
func (h *Hub) wakePlacers() {
	if h.waiters.Load() == 0 {
		return
	}
	h.mu.Lock()
	h.creditFreedLocked()
	h.mu.Unlock()
}

// creditFreedLocked wakes deliveries waiting for a credit.
func (h *Hub) creditFreedLocked() {
	close(h.freed)
	h.freed = make(chan struct{})
}

// capacityLocked reports the credits of the sessions that can take jobs.
func (h *Hub) capacityLocked() {
	now := h.cfg.Now()
	total := 0
	lanes := make(map[string]int, len(h.cfg.Lanes))
	type laneFig struct{ workers, granted, used int }
	figs := make(map[string]*laneFig, len(h.cfg.Lanes))
	for _, l := range h.cfg.Lanes {
		figs[l] = &laneFig{}
	}
	for _, s := range h.sessions {
		c, used := s.capacity(now)
		total += c
		for _, l := range s.lanes {
			lanes[l] += c
			f := figs[l]
			f.workers++
			f.granted += c
			f.used += used
		}
	}
	h.cfg.Capacity(total, lanes)
	for l, f := range figs {
		h.cfg.Metrics.PullWorkers(l, f.workers, f.granted, f.used)
	}
}

// add puts s among the sessions that take jobs, or says why it may not.
// Its key is checked again here, under the lock place assigns under: a
// reload whose key check ran between Connect's authentication and this
// add did not see s, and without this check s took jobs under a revoked
// or narrowed key until the next sweep (found by CI).
func (h *Hub) add(s *session) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errHubStopped
	}
	if err := h.keyRefusal(s); err != nil {
		return err
	}
	h.sessions = append(h.sessions, s)
	h.capacityLocked()
	h.creditFreedLocked() // its credits are free: a delivery waiting for one takes it now
	return nil
}

func (h *Hub) remove(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.sessions, s); i >= 0 {
		h.sessions = slices.Delete(h.sessions, i, i+1)
		h.capacityLocked()
	}
}

// changed recomputes the capacity after a session's credits or state
// changed, and wakes waiting deliveries if credits freed.
func (h *Hub) changed(freed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.capacityLocked()
	if freed {
		h.creditFreedLocked()
	}
}

// sweep fails leases past their deadline, hands back the unsent jobs of
// stalled workers, and ends sessions whose key was revoked.
func (h *Hub) sweep() {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		now := h.cfg.Now()
		for _, s := range h.checkKeys() {
			s.sweep(now)
		}
		h.moveUnsent(now)
		h.changed(true)
	}
}

// moveUnsent takes back the unsent jobs of sessions whose send has been
// under way for a sweep interval or more (a worker reading slowly, or
// not at all), as many as the sessions with no send under way have
// credits free for, and their deliveries place them again (Handle): on
// those sessions, by rank.better. Placed where no other session had a
// credit free, such a job waited behind the blocked send, for as long as
// the stall timeout (10s), after credits freed elsewhere.
//
// A free credit is counted once, for one job of any lane its session
// serves. Counted once per lane, a credit of a worker serving several
// lanes moved a job of each: all but one found no credit, and were
// placed again behind the blocked send, after the jobs placed there
// since (found in review).
func (h *Hub) moveUnsent(now time.Time) {
	h.mu.Lock()
	var spares []spare // sessions not sending, with credits free
	for _, s := range h.sessions {
		// A session's free credits are the same for each of its lanes.
		if r := s.offer(s.lanes[0], now); !r.sending && r.free > 0 {
			spares = append(spares, spare{s, r})
		}
	}
	// Claimed in place's order, so that a credit only a worker of
	// several lanes has is left for the jobs no other worker serves.
	slices.SortStableFunc(spares, func(a, b spare) int {
		switch {
		case a.rank.better(b.rank):
			return -1
		case b.rank.better(a.rank):
			return 1
		}
		return 0
	})
	claim := func(lane string) bool {
		for i := range spares {
			if sp := &spares[i]; sp.rank.free > 0 && sp.s.serves(lane) {
				sp.rank.free--
				return true
			}
		}
		return false
	}
	var moved []*delivery
	for _, s := range h.sessions {
		moved = s.takeBackStuck(now, claim, moved)
	}
	h.mu.Unlock()
	for _, d := range moved {
		d.result <- errUnsent
	}
}

// spare is a session moveUnsent may move unsent jobs to, and its rank;
// rank.free counts down as jobs claim its credits.
type spare struct {
	s    *session
	rank rank
}

// keysChanged reports whether the tenant file was reloaded since the
// sessions' keys were last checked.
func (h *Hub) keysChanged() bool {
	return h.cfg.KeysVersion != nil && h.cfg.KeysVersion() != h.keysChecked.Load()
}

// checkKeys ends the sessions whose key was revoked, or may no longer
// serve one of the session's lanes, and returns the others.
func (h *Hub) checkKeys() []*session {
	h.keysMu.Lock()
	defer h.keysMu.Unlock()
	var version *tenant.Version
	if h.cfg.KeysVersion != nil {
		version = h.cfg.KeysVersion() // read first: a reload during the check is checked again
	}
	h.mu.Lock()
	all := slices.Clone(h.sessions)
	h.mu.Unlock()
	kept := all[:0]
	for _, s := range all {
		if err := h.keyRefusal(s); err != nil {
			s.end(err)
			continue
		}
		kept = append(kept, s)
	}
	h.keysChecked.Store(version)
	return kept
}

// keyRefusal is why s may no longer take jobs under the keys in use, or
// nil.
func (h *Hub) keyRefusal(s *session) error {
	w, ok := h.cfg.Authenticate(s.key)
	if !ok {
		return errKeyRevoked
	}
	if i := slices.IndexFunc(s.lanes, func(l string) bool { return !w.Serves(l) }); i >= 0 {
		// A reload narrowed the key's lanes: the session must not take
		// another job of a lane it may no longer serve.
		return status.Errorf(codes.PermissionDenied, "worker key %q may no longer serve lane %q (the tenant file now allows %v): reconnect for the lanes it allows",
			w.Name, s.lanes[i], w.Lanes)
	}
	return nil
}

// newID returns a random hex id of n bytes.
func newID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
