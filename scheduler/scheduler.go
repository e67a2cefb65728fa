package scheduler

import (
	"cmp"
	"errors"
	"math"
	"time"
)

// Class is where a held job came from, which sets how early it is served.
type Class int

// Classes. A tenant's jobs are taken in this order.
const (
	Fresh     Class = iota // read from a shard queue, within the staleness bound
	Spillover              // read from the lane's spillover queue
	Backlog                // stale: read from the backlog queue, or from a shard past the staleness bound
	numClasses
)

func (c Class) String() string {
	switch c {
	case Fresh:
		return "fresh"
	case Spillover:
		return "spillover"
	case Backlog:
		return "backlog"
	}
	return "unknown"
}

// Level is why Next chose a job: the first level, in this order, that had a
// deliverable one (see the package documentation).
type Level int

// Levels, in the order Next serves them.
const (
	LevelMinimum  Level = iota + 1 // a tenant below its guaranteed share
	LevelSideline                  // spillover/backlog within their guaranteed share
	LevelInShare                   // fresh work within the tenant's fair rate
	LevelSpare                     // fresh work over the fair rate, and spillover work
	LevelBacklog                   // backlog work
	levelNone
)

func (l Level) String() string {
	switch l {
	case LevelMinimum:
		return "minimum"
	case LevelSideline:
		return "sideline"
	case LevelInShare:
		return "in_share"
	case LevelSpare:
		return "spare"
	case LevelBacklog:
		return "backlog"
	}
	return "none"
}

// Limits are one tenant's scheduling parameters, resolved by the caller
// (tier defaults applied).
type Limits struct {
	// Weight is the tenant's share of worker time relative to others with
	// work. Zero, negative or NaN count as 1.
	Weight float64
	// MinShare is the fraction of the slots guaranteed to the tenant
	// whenever it has work, in [0, 1). Zero: none.
	MinShare float64
	// FairRate and FairBurst mark when the tenant is over its fair rate:
	// jobs/s delivered at level "in share" before its fresh work drops to
	// level "spare". Zero FairRate: never over (no mark).
	FairRate  float64
	FairBurst int
	// MaxRate and MaxBurst are a hard ceiling on the tenant's deliveries
	// per second, for downstreams that need one. Zero MaxRate: none.
	MaxRate  float64
	MaxBurst int
	// MaxInFlight is a hard ceiling on the tenant's deliveries at once.
	// Zero: none beyond the slots.
	MaxInFlight int
}

func (l Limits) weight() float64 {
	if !(l.Weight > 0) || math.IsInf(l.Weight, 1) {
		return 1
	}
	return l.Weight
}

// Defaults for Config fields left zero.
const (
	SidelineShareDefault = 0.1
	InitialCostDefault   = 10 * time.Millisecond
	IdleTTLDefault       = 10 * time.Minute
	statsHalfLife        = 10 * time.Second
	costSmoothing        = 0.2 // weight of the newest duration in a tenant's mean
)

// Config configures a Scheduler.
type Config struct {
	// Slots is the number of jobs run at once. Required (≥ 1); SetSlots
	// changes it later.
	Slots int
	// SidelineShare is the fraction of the grants guaranteed to spillover
	// and backlog work while it waits, in (0, 1). Defaults to 0.1.
	SidelineShare float64
	// ReadAhead is the most fresh jobs one tenant may have held (pushed,
	// not yet granted). Push refuses more, and the caller spills them.
	// Defaults to max(Slots, 20), so one tenant alone can keep every slot
	// busy. Spillover and backlog jobs are not counted: the caller bounds
	// how many of those it reads.
	ReadAhead int
	// Limits returns a tenant's limits. Required. It is called when a
	// tenant becomes active and on Refresh.
	Limits func(tenant string) Limits
	// InitialCost is the cost charged for a tenant's first job, before
	// any of its jobs has finished. Defaults to 10ms.
	InitialCost time.Duration
	// IdleTTL is how long an idle tenant's state is kept (Sweep). Defaults
	// to 10 minutes.
	IdleTTL time.Duration
}

// Scheduler holds jobs of type T per tenant and class and hands them out
// to free slots. It is not safe for concurrent use: the caller serializes
// calls (the drainer holds one mutex around it).
type Scheduler[T any] struct {
	cfg     Config
	tenants map[string]*tenant[T]
	active  []*tenant[T]          // tenants holding jobs, in no order
	idx     index[T]              // the tenants holding jobs, where Next finds them
	recent  map[string]*tenant[T] // tenants granted a job lately: the ones Stats and Refresh look at

	running   int
	held      int
	heldClass [numClasses]int
	vclock    float64 // virtual start time of the job last granted
	// sideCredit is the sideline work's guaranteed share, counted in
	// grants: each grant adds SidelineShare to it and each grant of
	// spillover or backlog work takes one away, within ±sideCreditCap.
	// The guaranteed level opens at one. The cap keeps it a steady share:
	// measured as a ratio over the last tens of seconds, the share owed
	// after a stretch of fresh work alone came as a run of every grant
	// for about 100 ms, while in-share fresh work waited (issue 13).
	sideCredit float64

	groups map[string]*groupStats
	last   time.Time // when stats were last advanced
	first  time.Time // the first time seen: rates count from it
}

type tenant[T any] struct {
	id string
	// group is the group of the tenant's latest push, where Stats lists
	// it. Each held job keeps its own group (entry), which its grant
	// counts against: a tenant may hold jobs of two groups at once.
	group     string
	limits    Limits
	weight    float64
	queues    [numClasses]fifo[entry[T]]
	held      int
	inFlight  int
	vt        float64 // virtual time: worker seconds ÷ weight
	cost      float64 // mean seconds per job, smoothed
	costKnown bool
	fair, max *bucket
	activeAt  int    // index in Scheduler.active, -1 when not there
	seq       uint64 // the activation's number: earlier ones win ties
	// heaps and pos are where the index keeps the tenant, one per slot
	// (index.go); wakeAt is its timer's time in Unix nanoseconds.
	heaps    [numSlots]*tenantHeap[T]
	pos      [numSlots]int
	wakeAt   int64
	lastUsed time.Time

	// running are the tenant's granted jobs not yet Done: a job running
	// longer than its estimate is charged for the excess as it runs.
	running []*Ticket[T]
	work    fading // worker seconds
	waiting fading // seconds with held jobs, up to heldSince
	// heldSince is when the tenant last went from no held job to some.
	heldSince time.Time
	granted   int64
}

// entry is a held job and the group it counts against.
type entry[T any] struct {
	item  T
	group string
}

// Ticket is a granted job. Give it back to Done when the job ends.
type Ticket[T any] struct {
	Item   T
	Tenant string
	Group  string
	Class  Class
	Level  Level
	charge float64 // virtual time charged at grant: the cost estimate ÷ weight
	start  time.Time
	t      *tenant[T]
	done   bool
}

// New validates cfg and returns an empty Scheduler.
func New[T any](cfg Config) (*Scheduler[T], error) {
	if cfg.Limits == nil {
		return nil, errors.New("scheduler: Limits is required")
	}
	if cfg.Slots < 1 {
		return nil, errors.New("scheduler: Slots must be at least 1")
	}
	cfg.SidelineShare = cmp.Or(cfg.SidelineShare, SidelineShareDefault)
	if !(cfg.SidelineShare > 0 && cfg.SidelineShare < 1) {
		return nil, errors.New("scheduler: SidelineShare must be in (0, 1)")
	}
	if cfg.ReadAhead < 0 || cfg.InitialCost < 0 || cfg.IdleTTL < 0 {
		return nil, errors.New("scheduler: ReadAhead, InitialCost and IdleTTL must not be negative")
	}
	cfg.ReadAhead = cmp.Or(cfg.ReadAhead, max(cfg.Slots, 20))
	cfg.InitialCost = cmp.Or(cfg.InitialCost, InitialCostDefault)
	cfg.IdleTTL = cmp.Or(cfg.IdleTTL, IdleTTLDefault)
	s := &Scheduler[T]{cfg: cfg, tenants: map[string]*tenant[T]{}, recent: map[string]*tenant[T]{}, groups: map[string]*groupStats{}}
	s.sideCredit = s.sideCreditCap() // sideline work that comes first goes at once
	s.idx.init()
	return s, nil
}

// SetSlots changes the number of slots; running jobs keep theirs. Zero
// slots (no worker connected, say) grants nothing.
func (s *Scheduler[T]) SetSlots(n int) {
	n = max(n, 0)
	if n == s.cfg.Slots {
		return
	}
	s.cfg.Slots = n
	for _, t := range s.active {
		if t.limits.MinShare > 0 { // its guaranteed slots changed
			s.place(t, s.last)
		}
	}
}

// SetGroupSlots limits the jobs of group (a lane) running at once to n,
// within the slots in all: the workers that serve the group may be fewer
// than all the workers. A negative n removes the limit.
func (s *Scheduler[T]) SetGroupSlots(group string, n int) {
	g := s.group(group)
	g.limited, g.slots = n >= 0, max(n, 0)
}

// Slots returns the number of slots.
func (s *Scheduler[T]) Slots() int { return s.cfg.Slots }

// Running returns the number of granted jobs not yet Done.
func (s *Scheduler[T]) Running() int { return s.running }

// Held returns the number of jobs held (pushed, not granted).
func (s *Scheduler[T]) Held() int { return s.held }

// HeldIn returns the number of jobs of class c held.
func (s *Scheduler[T]) HeldIn(c Class) int { return s.heldClass[c] }

// Active returns the number of tenants holding jobs.
func (s *Scheduler[T]) Active() int { return len(s.active) }

// HeldFresh returns the number of fresh jobs tenant holds.
func (s *Scheduler[T]) HeldFresh(tenant string) int {
	if t := s.tenants[tenant]; t != nil {
		return t.queues[Fresh].len()
	}
	return 0
}

// CanHold reports whether Push would accept a fresh job of tenant now.
func (s *Scheduler[T]) CanHold(tenant string) bool {
	t := s.tenants[tenant]
	return t == nil || t.queues[Fresh].len() < s.cfg.ReadAhead
}

// Push holds item, a job of tenant in group (its lane), as class c. It
// returns false, holding nothing, when c is Fresh and the tenant's
// read-ahead budget is full: the caller then leaves the job on a queue
// (spills it).
func (s *Scheduler[T]) Push(now time.Time, tenantID, group string, c Class, item T) bool {
	s.advance(now)
	t := s.tenants[tenantID]
	if t == nil {
		t = &tenant[T]{id: tenantID, activeAt: -1}
		s.tenants[tenantID] = t
	}
	if c == Fresh && t.queues[Fresh].len() >= s.cfg.ReadAhead {
		return false
	}
	if t.held == 0 && t.inFlight == 0 {
		// Becoming active: no credit for the time it was idle.
		t.vt = max(t.vt, s.vclock)
		s.configure(t, now)
	}
	t.group = group
	t.lastUsed = now
	if t.held == 0 {
		t.activeAt = len(s.active)
		s.active = append(s.active, t)
		t.heldSince = now
		s.idx.seq++
		t.seq = s.idx.seq
	}
	t.queues[c].push(entry[T]{item: item, group: group})
	t.held++
	s.held++
	s.heldClass[c]++
	s.group(group).held++
	s.place(t, now)
	return true
}

func (s *Scheduler[T]) configure(t *tenant[T], now time.Time) {
	l := s.cfg.Limits(t.id)
	t.limits = l
	t.weight = l.weight()
	t.fair = setBucket(t.fair, l.FairRate, l.FairBurst, now)
	t.max = setBucket(t.max, l.MaxRate, l.MaxBurst, now)
}

// setBucket returns b set to rate r and burst, nil when r sets no limit;
// a new bucket starts full.
func setBucket(b *bucket, r float64, burst int, now time.Time) *bucket {
	if !(r > 0) || math.IsInf(r, 1) {
		return nil
	}
	if b == nil {
		b = &bucket{}
	}
	b.set(r, max(burst, 1), now)
	return b
}

// sideCreditCap bounds the sideline credit: the guaranteed share of the
// slots, and at least one grant.
func (s *Scheduler[T]) sideCreditCap() float64 {
	return max(1, s.cfg.SidelineShare*float64(s.cfg.Slots))
}

// Next grants the next job to a free slot. It returns nil when every slot
// is taken or no held job is deliverable; wait is then, if positive, the
// time after which a job held back by a hard rate ceiling becomes
// deliverable (call Next again by then).
func (s *Scheduler[T]) Next(now time.Time) (tk *Ticket[T], wait time.Duration) {
	s.advance(now)
	if s.running >= s.cfg.Slots || s.held == 0 {
		return nil, 0
	}
	s.wake(now)
	sideOpen := s.heldClass[Spillover]+s.heldClass[Backlog] > 0 && s.sideCredit >= 1
	best, k, class := s.choose(now, sideOpen)
	if best == nil {
		return nil, s.maxWait(now)
	}
	level := heapLevel[k]
	if level >= LevelSpare && !best.costKnown {
		levelWeight, levelRunning := s.levelShare(k, sideOpen)
		perWeight := float64(s.cfg.Slots-(s.running-levelRunning)) / levelWeight
		if probeCapped(best, perWeight) {
			if other := s.bestUncapped(k, sideOpen, perWeight, now); other != nil {
				best = other
				class, _ = s.offer(other, level, sideOpen)
			}
		}
	}
	return s.grant(best, level, class, now), 0
}

// probeCapped reports whether t, at one of the levels nothing else bounds
// (over-rate and backlog work), goes after the others there: none of its
// jobs has finished yet and it holds its weighted share of the slots not
// held by tenants at other levels (perWeight slots per unit of weight).
//
// Until a job finishes, a tenant's cost is a guess (InitialCost, and the
// time its running jobs have run so far). A tenant of long jobs, charged
// too little, would otherwise take most of the slots at once and keep
// them for as long as its jobs run, while quiet tenants wait for a slot
// to free (issue 13: a slow tenant took 9 of 16 slots at start-up,
// against 4 in steady state). The cap orders; it never holds a slot idle:
// a capped tenant goes when no one else at its level can.
func probeCapped[T any](t *tenant[T], perWeight float64) bool {
	return !t.costKnown && float64(t.inFlight) >= perWeight*t.weight
}

func (t *tenant[T]) firstClass() Class {
	for c := range numClasses {
		if t.queues[c].len() > 0 {
			return c
		}
	}
	return Backlog
}

// share is the number of slots a fraction guarantees: at least one.
func share(f float64, slots int) int { return max(1, int(math.Ceil(f*float64(slots)))) }

func (s *Scheduler[T]) grant(t *tenant[T], level Level, c Class, now time.Time) *Ticket[T] {
	e := t.queues[c].pop()
	t.held--
	s.held--
	s.heldClass[c]--
	g := s.group(e.group)
	g.held--
	if t.held == 0 {
		s.deactivate(t, now)
	}
	if t.max != nil {
		t.max.take(now)
	}
	if t.fair != nil && c == Fresh {
		t.fair.take(now) // takes a token if there is one: over rate otherwise
	}
	cost := s.cfg.InitialCost.Seconds()
	if t.costKnown {
		cost = t.cost
	}
	charge := cost / t.weight
	if level >= LevelInShare {
		// Grants at the first two levels skip the virtual-time order, so
		// only the others move the clock that newly active tenants start
		// from: else one guaranteed tenant far ahead would drag every
		// newcomer's start past the tenants it competes with.
		s.vclock = max(s.vclock, t.vt)
	}
	t.vt += charge
	t.inFlight++
	t.granted++
	t.lastUsed = now
	s.recent[t.id] = t
	s.running++
	g.running++
	credit := s.sideCreditCap()
	s.sideCredit = min(s.sideCredit+s.cfg.SidelineShare, credit)
	if c != Fresh {
		s.sideCredit = max(s.sideCredit-1, -credit)
	}
	tk := &Ticket[T]{Item: e.item, Tenant: t.id, Group: e.group, Class: c, Level: level, charge: charge, t: t, start: now}
	t.running = append(t.running, tk)
	s.place(t, now)
	return tk
}

func (s *Scheduler[T]) deactivate(t *tenant[T], now time.Time) {
	if now.After(t.heldSince) {
		t.waiting.add(now, now.Sub(t.heldSince).Seconds())
	}
	i, last := t.activeAt, len(s.active)-1
	s.active[i] = s.active[last]
	s.active[i].activeAt = i
	s.active[last] = nil
	s.active = s.active[:last]
	t.activeAt = -1
	s.place(t, now) // out of every heap
}

// Done ends tk's job, which used worker time used, and frees its slot. It
// charges the tenant the difference between used and what Next charged.
// A second Done of the same ticket does nothing.
func (s *Scheduler[T]) Done(now time.Time, tk *Ticket[T], used time.Duration) {
	if tk == nil || tk.done {
		return
	}
	s.advance(now)
	tk.done = true
	t := tk.t
	sec := max(used.Seconds(), 0)
	t.vt += sec/t.weight - tk.charge
	if t.costKnown {
		t.cost += costSmoothing * (sec - t.cost)
	} else {
		t.cost, t.costKnown = sec, true
	}
	t.work.add(now, sec)
	s.release(t, tk, now)
	s.group(tk.Group).finished.add(1)
}

// Cancel gives back tk's slot for a job that never ran (it expired while
// held, say): the tenant is refunded what Next charged, and its cost
// estimate learns nothing, as no worker time was used. A ticket already
// given back (Done or Cancel) is ignored.
func (s *Scheduler[T]) Cancel(now time.Time, tk *Ticket[T]) {
	if tk == nil || tk.done {
		return
	}
	s.advance(now)
	tk.done = true
	t := tk.t
	t.vt -= tk.charge
	s.release(t, tk, now)
}

// release takes tk, given back, off its tenant and frees its slot.
func (s *Scheduler[T]) release(t *tenant[T], tk *Ticket[T], now time.Time) {
	for i, r := range t.running {
		if r == tk {
			t.running = append(t.running[:i], t.running[i+1:]...)
			break
		}
	}
	t.inFlight--
	t.lastUsed = now
	s.running--
	s.group(tk.Group).running--
	s.place(t, now)
}

// Each calls fn for every held job.
func (s *Scheduler[T]) Each(fn func(tenant string, c Class, item T)) {
	for _, t := range s.active {
		for c := range numClasses {
			t.queues[c].each(func(e entry[T]) { fn(t.id, c, e.item) })
		}
	}
}

// RemoveIf removes every held job for which drop returns true and returns
// them. Use it for jobs whose lease ran out or that the caller moves away.
func (s *Scheduler[T]) RemoveIf(drop func(tenant string, c Class, item T) bool) []T {
	var out []T
	for _, t := range append([]*tenant[T](nil), s.active...) {
		for c := range numClasses {
			removed := t.queues[c].removeIf(func(e entry[T]) bool { return drop(t.id, c, e.item) })
			n := len(removed)
			if n == 0 {
				continue
			}
			for _, e := range removed {
				out = append(out, e.item)
				s.group(e.group).held--
			}
			t.held -= n
			s.held -= n
			s.heldClass[c] -= n
		}
		if t.held == 0 {
			s.deactivate(t, time.Time{}) // no time: the stretch is not counted
		} else {
			// The latest time seen stands for now: a level that time
			// has changed since is put right by the timers at Next.
			s.place(t, s.last)
		}
	}
	return out
}

// Refresh reads the limits again of the tenants with work or lately
// served (after a configuration reload); the others read theirs when they
// next become active.
func (s *Scheduler[T]) Refresh(now time.Time) {
	for _, t := range s.active {
		s.configure(t, now)
		s.place(t, now)
	}
	for _, t := range s.recent {
		if t.activeAt < 0 {
			s.configure(t, now)
		}
	}
}

// Sweep forgets tenants idle (nothing held or running) for IdleTTL whose
// buckets have refilled, so memory stays bounded; a forgotten tenant comes
// back exactly as it would have been. It returns how many it forgot.
func (s *Scheduler[T]) Sweep(now time.Time) int {
	n := 0
	for id, t := range s.tenants {
		if t.held > 0 || t.inFlight > 0 || now.Sub(t.lastUsed) < s.cfg.IdleTTL || !full(t.fair, now) || !full(t.max, now) {
			continue
		}
		delete(s.tenants, id)
		delete(s.recent, id)
		n++
	}
	return n
}

func full(b *bucket, now time.Time) bool { return b == nil || b.full(now) }

func tokenWait(b *bucket, now time.Time) time.Duration { return b.wait(now) }

// runningVT is the tenant's virtual time with its running jobs charged
// for the time they have run beyond their estimates, so that a tenant
// whose jobs turn out slow (its first ones, before any has finished) is
// charged while they run, not only once they end.
func (t *tenant[T]) runningVT(now time.Time) float64 {
	vt := t.vt
	for _, tk := range t.running {
		if over := now.Sub(tk.start).Seconds()/t.weight - tk.charge; over > 0 {
			vt += over
		}
	}
	return vt
}
