package scheduler

import (
	"iter"
	"time"
)

// The index keeps the tenants holding work sorted where Next looks for
// them, so that a grant costs about the logarithm of the tenants with work
// rather than a look at each one: with a thousand tenants holding jobs, a
// scan of all of them took 20 µs a grant under the drainer's lock, and
// 1.6-1.8 µs with the heaps (BenchmarkGrant, docs/operations.md).
//
// Each group (lane) has a heap per level, ordered by virtual time; a
// tenant is in the heaps of the group its job at that level belongs to
// (the first of the class it would be taken from), and in at most one
// heap per slot:
//
//   - base: the heap of the level it qualifies for while the sideline
//     share is closed (minimum, in share, spare or backlog). A tenant
//     that no level offers (at its MaxInFlight, or held back by its
//     MaxRate) is in none.
//   - side: with spillover or backlog work, the heap of the sideline level
//     (spillover before backlog), used while the sideline share is open.
//   - wake: a timer, when a rate bucket will change the tenant's level
//     (MaxRate lets it go again; FairRate moves its fresh work from spare
//     back to in share).
//
// Everything that changes a tenant's place (a push, a grant, a Done, new
// limits, new slots) calls place at once; the timers do it for the
// passing of time. Virtual times only change at those events, so a heap's
// order holds between them. What time alone changes within a level, the
// charge of running jobs past their estimates (runningVT), only raises a
// tenant's key: search uses the heap's order as a lower bound and stops
// as soon as nothing left can beat the best found.
const (
	baseSlot = iota
	sideSlot
	wakeSlot
	numSlots
)

// tenantHeap is a binary min-heap of tenants that keeps each tenant's
// position (tenant.pos), so that a tenant can be moved or removed.
type tenantHeap[T any] struct {
	ts     []*tenant[T]
	slot   int  // which of a tenant's positions this heap keeps
	byWake bool // ordered by wakeAt; else by virtual time
}

// before orders tenants by virtual time, then by when they became active
// (seq): among equals, the one waiting longest goes first.
func before(vtA float64, seqA uint64, vtB float64, seqB uint64) bool {
	if vtA != vtB {
		return vtA < vtB
	}
	return seqA < seqB
}

func (h *tenantHeap[T]) less(i, j int) bool {
	a, b := h.ts[i], h.ts[j]
	if h.byWake && a.wakeAt != b.wakeAt {
		return a.wakeAt < b.wakeAt
	}
	if h.byWake {
		return a.seq < b.seq
	}
	return before(a.vt, a.seq, b.vt, b.seq)
}

func (h *tenantHeap[T]) swap(i, j int) {
	h.ts[i], h.ts[j] = h.ts[j], h.ts[i]
	h.ts[i].pos[h.slot] = i
	h.ts[j].pos[h.slot] = j
}

func (h *tenantHeap[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h *tenantHeap[T]) down(i int) {
	for {
		least := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h.ts) && h.less(c, least) {
				least = c
			}
		}
		if least == i {
			return
		}
		h.swap(i, least)
		i = least
	}
}

func (h *tenantHeap[T]) push(t *tenant[T]) {
	t.heaps[h.slot], t.pos[h.slot] = h, len(h.ts)
	h.ts = append(h.ts, t)
	h.up(len(h.ts) - 1)
}

func (h *tenantHeap[T]) remove(t *tenant[T]) {
	i, last := t.pos[h.slot], len(h.ts)-1
	if i != last {
		h.swap(i, last)
	}
	h.ts[last] = nil
	h.ts = h.ts[:last]
	if i != last {
		h.fix(i)
	}
	t.heaps[h.slot] = nil
}

// fix restores the order after the key of the tenant at i changed.
func (h *tenantHeap[T]) fix(i int) {
	h.up(i)
	h.down(h.ts[i].pos[h.slot])
}

// put makes h the heap t is in at h's slot (nil: none), keeping its
// order if t stays where it was and its key changed.
func put[T any](t *tenant[T], slot int, h *tenantHeap[T]) {
	switch cur := t.heaps[slot]; {
	case cur == h && h != nil:
		h.fix(t.pos[slot])
	case cur != h:
		if cur != nil {
			cur.remove(t)
		}
		if h != nil {
			h.push(t)
		}
	}
}

// Heaps of a group, one per level (two for the sideline level: its
// spillover work goes before its backlog work), in the order Next looks.
const (
	heapMinimum = iota
	heapSideSpill
	heapSideBacklog
	heapInShare
	heapSpare
	heapBacklog
	numHeaps
)

// heapLevel is the level each heap serves.
var heapLevel = [numHeaps]Level{LevelMinimum, LevelSideline, LevelSideline, LevelInShare, LevelSpare, LevelBacklog}

// groupIndex is one group's heaps: the tenants whose job at that level
// would be the group's (the head of the class it would come from). A
// group with no free slot is passed over whole.
type groupIndex[T any] struct {
	stats *groupStats
	heaps [numHeaps]tenantHeap[T]
}

func (g *groupIndex[T]) full() bool { return g.stats.limited && g.stats.running >= g.stats.slots }

// open yields heap k of each group with a free slot: the heaps where a
// grant at that heap's level may be found.
func (x *index[T]) open(k int) iter.Seq[*tenantHeap[T]] {
	return func(yield func(*tenantHeap[T]) bool) {
		for _, g := range x.list {
			if !g.full() && !yield(&g.heaps[k]) {
				return
			}
		}
	}
}

// index is the Scheduler's heaps.
type index[T any] struct {
	groups            map[string]*groupIndex[T]
	list              []*groupIndex[T] // the same, in a slice to look through
	maxWait, fairWait tenantHeap[T]    // wake
	frontier          []int            // search's working space
	seq               uint64           // activations so far
}

func (x *index[T]) init() {
	x.groups = map[string]*groupIndex[T]{}
	x.maxWait = tenantHeap[T]{slot: wakeSlot, byWake: true}
	x.fairWait = tenantHeap[T]{slot: wakeSlot, byWake: true}
}

// heap returns the heap k of the group of t's first job of class c.
func (s *Scheduler[T]) heap(t *tenant[T], c Class, k int) *tenantHeap[T] {
	name := t.queues[c].peek().group
	g := s.idx.groups[name]
	if g == nil {
		g = &groupIndex[T]{stats: s.group(name)}
		for i := range g.heaps {
			g.heaps[i].slot = baseSlot
		}
		g.heaps[heapSideSpill].slot, g.heaps[heapSideBacklog].slot = sideSlot, sideSlot
		s.idx.groups[name] = g
		s.idx.list = append(s.idx.list, g)
	}
	return &g.heaps[k]
}

// place puts t in the heaps its state at now calls for: none when it
// holds no job.
func (s *Scheduler[T]) place(t *tenant[T], now time.Time) {
	var base, side, wake *tenantHeap[T]
	n := now.UnixNano()
	switch {
	case t.held == 0:
	case t.limits.MaxInFlight > 0 && t.inFlight >= t.limits.MaxInFlight:
		// Out until a job of its ends (Done places it again).
	case t.max != nil && t.max.readyAt() > n:
		wake, t.wakeAt = &s.idx.maxWait, t.max.readyAt()
	case t.limits.MinShare > 0 && t.inFlight < share(t.limits.MinShare, s.cfg.Slots):
		base = s.heap(t, t.firstClass(), heapMinimum)
	default:
		switch {
		case t.queues[Spillover].len() > 0:
			side = s.heap(t, Spillover, heapSideSpill)
		case t.queues[Backlog].len() > 0:
			side = s.heap(t, Backlog, heapSideBacklog)
		}
		switch {
		case t.queues[Fresh].len() == 0 && t.queues[Spillover].len() > 0:
			base = s.heap(t, Spillover, heapSpare)
		case t.queues[Fresh].len() == 0:
			base = s.heap(t, Backlog, heapBacklog)
		case t.fair == nil || t.fair.readyAt() <= n:
			base = s.heap(t, Fresh, heapInShare)
		default:
			base = s.heap(t, Fresh, heapSpare)
			wake, t.wakeAt = &s.idx.fairWait, t.fair.readyAt()
		}
	}
	put(t, baseSlot, base)
	put(t, sideSlot, side)
	put(t, wakeSlot, wake)
}

// wake places again the tenants whose timers are due at now.
func (s *Scheduler[T]) wake(now time.Time) {
	n := now.UnixNano()
	for _, h := range [2]*tenantHeap[T]{&s.idx.maxWait, &s.idx.fairWait} {
		for len(h.ts) > 0 && h.ts[0].wakeAt <= n {
			s.place(h.ts[0], now)
		}
	}
}

// maxWait is the time from now until the first tenant held back by its
// MaxRate may go again; 0 if none is.
func (s *Scheduler[T]) maxWait(now time.Time) time.Duration {
	if h := &s.idx.maxWait; len(h.ts) > 0 {
		return time.Duration(max(h.ts[0].wakeAt-now.UnixNano(), 0))
	}
	return 0
}

// choose returns the tenant Next grants to, the heap it was found in
// (its level: heapLevel) and the class its job is taken from; nil when
// no held job is deliverable.
func (s *Scheduler[T]) choose(now time.Time, sideOpen bool) (best *tenant[T], k int, c Class) {
	for k := range numHeaps {
		level := heapLevel[k]
		if level == LevelSideline && !sideOpen {
			continue // served only while open
		}
		if level == LevelBacklog && sideOpen {
			continue // every tenant of those heaps is at the sideline level
		}
		var bestVT float64
		for h := range s.idx.open(k) {
			best, bestVT = s.search(h, level, sideOpen, now, best, bestVT)
		}
		if best != nil {
			c, _ := s.offer(best, level, sideOpen)
			return best, k, c
		}
	}
	return nil, 0, Fresh
}

// offer returns the class a tenant in one of level's heaps would be
// served from, and false when the level does not offer it now: with the
// sideline share open, a tenant with spillover or backlog work is at the
// sideline level.
func (s *Scheduler[T]) offer(t *tenant[T], level Level, sideOpen bool) (Class, bool) {
	switch {
	case level == LevelMinimum:
		return t.firstClass(), true
	case level == LevelSideline && t.queues[Spillover].len() > 0:
		return Spillover, true
	case level == LevelSideline:
		return Backlog, true
	case sideOpen && (t.queues[Spillover].len() > 0 || t.queues[Backlog].len() > 0):
		return 0, false
	case level == LevelBacklog:
		return Backlog, true
	case t.queues[Fresh].len() > 0:
		return Fresh, true
	}
	return Spillover, true
}

// search returns, of best (with virtual time bestVT) and the tenants of
// h that level offers, the one with the least virtual time counting its
// running jobs (runningVT), ties going to the one active longest; nil if
// there is none. It visits the heap in order of virtual time, which is at
// most runningVT, and stops when the rest cannot beat the best found.
func (s *Scheduler[T]) search(h *tenantHeap[T], level Level, sideOpen bool, now time.Time, best *tenant[T], bestVT float64) (*tenant[T], float64) {
	if len(h.ts) == 0 {
		return best, bestVT
	}
	// frontier is a min-heap of positions in h: the nodes not yet visited
	// whose parents were.
	f := s.idx.frontier[:0]
	f = append(f, 0)
	for len(f) > 0 {
		i := f[0]
		f = popFrontier(h, f)
		t := h.ts[i]
		if best != nil && !before(t.vt, t.seq, bestVT, best.seq) {
			break
		}
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h.ts) {
				f = pushFrontier(h, f, c)
			}
		}
		if _, ok := s.offer(t, level, sideOpen); !ok {
			continue
		}
		if vt := t.runningVT(now); best == nil || before(vt, t.seq, bestVT, best.seq) {
			best, bestVT = t, vt
		}
	}
	s.idx.frontier = f[:0]
	return best, bestVT
}

func pushFrontier[T any](h *tenantHeap[T], f []int, i int) []int {
	f = append(f, i)
	for j := len(f) - 1; j > 0; {
		parent := (j - 1) / 2
		if !h.less(f[j], f[parent]) {
			break
		}
		f[j], f[parent] = f[parent], f[j]
		j = parent
	}
	return f
}

func popFrontier[T any](h *tenantHeap[T], f []int) []int {
	last := len(f) - 1
	f[0] = f[last]
	f = f[:last]
	for j := 0; ; {
		least := j
		for _, c := range [2]int{2*j + 1, 2*j + 2} {
			if c < len(f) && h.less(f[c], f[least]) {
				least = c
			}
		}
		if least == j {
			return f
		}
		f[j], f[least] = f[least], f[j]
		j = least
	}
}

// levelShare is the weight and running jobs of the tenants in heap k
// (spare or backlog) of the groups with a free slot, for the probe cap.
func (s *Scheduler[T]) levelShare(k int, sideOpen bool) (weight float64, running int) {
	for h := range s.idx.open(k) {
		for _, t := range h.ts {
			if _, ok := s.offer(t, heapLevel[k], sideOpen); ok {
				weight += t.weight
				running += t.inFlight
			}
		}
	}
	return weight, running
}

// bestUncapped returns the tenant with the least virtual time among
// those of heap k in the groups with a free slot that the level offers
// and that are not probeCapped; nil if none.
func (s *Scheduler[T]) bestUncapped(k int, sideOpen bool, perWeight float64, now time.Time) *tenant[T] {
	var best *tenant[T]
	var bestVT float64
	for h := range s.idx.open(k) {
		for _, t := range h.ts {
			if _, ok := s.offer(t, heapLevel[k], sideOpen); !ok || probeCapped(t, perWeight) {
				continue
			}
			if vt := t.runningVT(now); best == nil || before(vt, t.seq, bestVT, best.seq) {
				best, bestVT = t, vt
			}
		}
	}
	return best
}
