package scheduler

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The simulation drives a policy with a fake clock: jobs arrive per
// tenant at fixed rates, each runs for its tenant's cost, and slots are
// filled after every event. It checks three properties:
//
//   - work conservation: after every event, no slot is idle while a job
//     is held that no hard ceiling holds back;
//   - weight shares: tenants that were backlogged throughout get worker
//     time in proportion to their weights, within ±10 %;
//   - bounded delay: a quiet tenant's job (one offering under half its
//     weighted share) waits at most twice the longest job cost.
//
// It runs many random tenant mixes against the Scheduler, and against a
// model of the drainer's previous rules (legacyPolicy), on which it must
// find violations: that is what it is for.

type simTenant struct {
	id          string
	weight      float64
	rate        float64       // arrivals per second
	cost        time.Duration // worker time per job
	fairRate    float64
	fairBurst   int // default 1
	maxInFlight int
	class       Class
	phase       time.Duration // first arrival; default half a period
	spread      float64       // cost varies uniformly within ± spread × cost
}

type simMix struct {
	slots   int
	tenants []simTenant
	run     time.Duration
}

type simJob struct {
	tenant  int
	arrived time.Duration
}

// policy is what the simulation drives: the Scheduler, or the legacy model.
type policy interface {
	push(now time.Duration, tenant int, j simJob) bool
	next(now time.Duration) (j simJob, ok bool, done func(now, used time.Duration))
}

// simReadAhead is each tenant's read-ahead budget in the simulation: what
// is refused is left on its queue (spilled), as in the drainer.
const simReadAhead = 64

type schedPolicy struct {
	s   *Scheduler[simJob]
	mix simMix
}

func simEpoch(d time.Duration) time.Time { return time.Unix(1_700_000_000, 0).Add(d) }

func newSchedPolicy(t testing.TB, mix simMix) *schedPolicy {
	s, err := New[simJob](Config{
		Slots: mix.slots, ReadAhead: simReadAhead,
		Limits: func(id string) Limits {
			i, err := strconv.Atoi(strings.TrimPrefix(id, "t"))
			if err != nil {
				panic("simulated tenant ids are t<index>: " + id)
			}
			st := mix.tenants[i]
			return Limits{Weight: st.weight, FairRate: st.fairRate, FairBurst: max(st.fairBurst, 1), MaxInFlight: st.maxInFlight}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &schedPolicy{s: s, mix: mix}
}

func (p *schedPolicy) push(now time.Duration, tenant int, j simJob) bool {
	return p.s.Push(simEpoch(now), fmt.Sprintf("t%d", tenant), "lane", p.mix.tenants[tenant].class, j)
}

func (p *schedPolicy) next(now time.Duration) (simJob, bool, func(now, used time.Duration)) {
	tk, _ := p.s.Next(simEpoch(now))
	if tk == nil {
		return simJob{}, false, nil
	}
	return tk.Item, true, func(now, used time.Duration) { p.s.Done(simEpoch(now), tk, used) }
}

// legacyPolicy models the rules the drainer had before this package: one
// FIFO over all arrivals; a tenant over its drain rate (a token bucket of
// burst 1) has its job held back for 5 s (spilled, then deferred), and
// one at its in-flight limit likewise; no account of worker time.
type legacyPolicy struct {
	mix      simMix
	queue    []simJob
	deferred []deferredJob
	tokens   []float64
	lastFill time.Duration
	inFlight []int
	running  int
}

type deferredJob struct {
	j     simJob
	until time.Duration
}

func newLegacyPolicy(mix simMix) *legacyPolicy {
	p := &legacyPolicy{mix: mix, tokens: make([]float64, len(mix.tenants)), inFlight: make([]int, len(mix.tenants))}
	for i := range p.tokens {
		p.tokens[i] = 1
	}
	return p
}

func (p *legacyPolicy) push(_ time.Duration, _ int, j simJob) bool {
	if len(p.queue) >= simReadAhead*len(p.mix.tenants) {
		return false
	}
	p.queue = append(p.queue, j)
	return true
}

func (p *legacyPolicy) next(now time.Duration) (simJob, bool, func(now, used time.Duration)) {
	dt := (now - p.lastFill).Seconds()
	p.lastFill = now
	for i, st := range p.mix.tenants {
		if st.fairRate > 0 {
			p.tokens[i] = min(1, p.tokens[i]+dt*st.fairRate)
		}
	}
	// Deferrals all last 5 s, so they come due in the order they were made.
	for len(p.deferred) > 0 && p.deferred[0].until <= now {
		p.queue = append(p.queue, p.deferred[0].j)
		p.deferred = p.deferred[1:]
	}
	if p.running >= p.mix.slots {
		return simJob{}, false, nil
	}
	for len(p.queue) > 0 {
		j := p.queue[0]
		p.queue = p.queue[1:]
		st := p.mix.tenants[j.tenant]
		overRate := st.fairRate > 0 && p.tokens[j.tenant] < 1
		atLimit := st.maxInFlight > 0 && p.inFlight[j.tenant] >= st.maxInFlight
		if overRate || atLimit {
			p.deferred = append(p.deferred, deferredJob{j: j, until: now + 5*time.Second})
			continue
		}
		if st.fairRate > 0 {
			p.tokens[j.tenant]--
		}
		p.inFlight[j.tenant]++
		p.running++
		return j, true, func(time.Duration, time.Duration) { p.inFlight[j.tenant]--; p.running-- }
	}
	return simJob{}, false, nil
}

type simEvent struct {
	at     time.Duration
	tenant int // arrival of tenant, or -1
	done   func(now, used time.Duration)
	used   time.Duration
	worker bool
}

type eventQueue []simEvent

func (q eventQueue) Len() int           { return len(q) }
func (q eventQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q eventQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)        { *q = append(*q, x.(simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simResult is what one simulated run measured.
type simResult struct {
	violations []string
	work       []time.Duration // worker time per tenant
	maxWait    []time.Duration // longest wait per tenant
	waits      [][]time.Duration
	arrivals   [][]time.Duration // when each job in waits arrived
	peakEarly  []int             // most jobs running at once in the first second, per tenant
	delivered  []int
}

func (r *simResult) violate(format string, args ...any) {
	if len(r.violations) < 5 {
		r.violations = append(r.violations, fmt.Sprintf(format, args...))
	}
}

// simulate runs mix through p and checks the properties.
func simulate(mix simMix, p policy) simResult {
	n := len(mix.tenants)
	r := simResult{work: make([]time.Duration, n), maxWait: make([]time.Duration, n), delivered: make([]int, n), waits: make([][]time.Duration, n), arrivals: make([][]time.Duration, n), peakEarly: make([]int, n)}
	held := make([][]simJob, n) // the simulation's own account of held jobs
	rng := rand.New(rand.NewPCG(1, 2))
	inFlight := make([]int, n)
	running := 0
	q := &eventQueue{}
	for i, st := range mix.tenants {
		if st.rate > 0 {
			at := time.Duration(float64(time.Second) / st.rate / 2)
			if st.phase > 0 {
				at = st.phase
			}
			heap.Push(q, simEvent{at: at, tenant: i})
		}
	}
	var maxCost time.Duration
	for _, st := range mix.tenants {
		maxCost = max(maxCost, st.cost)
	}
	for q.Len() > 0 {
		e := heap.Pop(q).(simEvent)
		now := e.at
		if now > mix.run {
			break
		}
		if e.worker {
			e.done(now, e.used)
		} else {
			j := simJob{tenant: e.tenant, arrived: now}
			if p.push(now, e.tenant, j) {
				held[e.tenant] = append(held[e.tenant], j)
			}
			heap.Push(q, simEvent{at: now + time.Duration(float64(time.Second)/mix.tenants[e.tenant].rate), tenant: e.tenant})
		}
		// Fill the free slots.
		for {
			j, ok, done := p.next(now)
			if !ok {
				break
			}
			t := j.tenant
			if len(held[t]) == 0 {
				r.violate("granted a job tenant %d never held", t)
				break
			}
			held[t] = removeJob(held[t], j)
			inFlight[t]++
			running++
			if now < time.Second {
				r.peakEarly[t] = max(r.peakEarly[t], inFlight[t])
			}
			wait := now - j.arrived
			r.maxWait[t] = max(r.maxWait[t], wait)
			r.waits[t] = append(r.waits[t], wait)
			r.arrivals[t] = append(r.arrivals[t], j.arrived)
			cost := mix.tenants[t].cost
			if sp := mix.tenants[t].spread; sp > 0 {
				cost = time.Duration(float64(cost) * (1 + sp*(2*rng.Float64()-1)))
			}
			r.work[t] += min(cost, mix.run-now)
			r.delivered[t]++
			heap.Push(q, simEvent{at: now + cost, worker: true, used: cost, done: func(now, used time.Duration) {
				inFlight[t]--
				running--
				done(now, used)
			}})
		}
		if running < mix.slots {
			for t := range held {
				st := mix.tenants[t]
				if len(held[t]) > 0 && (st.maxInFlight == 0 || inFlight[t] < st.maxInFlight) {
					r.violate("at %v: %d of %d slots busy while tenant %d has %d deliverable jobs held", now, running, mix.slots, t, len(held[t]))
					break
				}
			}
		}
	}
	// Weight shares among tenants backlogged throughout (offering more
	// than all the slots, with no ceiling or fair-rate mark).
	var sat []int
	for i, st := range mix.tenants {
		if st.class == Fresh && st.maxInFlight == 0 && st.fairRate == 0 && st.rate*st.cost.Seconds() > float64(mix.slots) {
			sat = append(sat, i)
		}
	}
	for _, i := range sat {
		for _, j := range sat {
			if i >= j {
				continue
			}
			a := r.work[i].Seconds() / mix.tenants[i].weight
			b := r.work[j].Seconds() / mix.tenants[j].weight
			if ratio := a / b; ratio < 0.9 || ratio > 1.1 {
				r.violate("tenants %d and %d (weights %g, %g) got worker time %v and %v: weighted ratio %.2f, want 1 ± 0.1",
					i, j, mix.tenants[i].weight, mix.tenants[j].weight, r.work[i], r.work[j], ratio)
			}
		}
	}
	// Bounded delay for quiet tenants: a quiet job waits for a slot to
	// free (at most the longest cost, twice for safety) and, at worst,
	// for one job of every other quiet tenant ahead of it.
	totalWeight := 0.0
	for _, st := range mix.tenants {
		totalWeight += st.weight
	}
	isQuiet := func(st simTenant) bool {
		return st.class == Fresh && st.rate*st.cost.Seconds() < float64(mix.slots)*st.weight/totalWeight/2
	}
	var quietAhead time.Duration
	for _, st := range mix.tenants {
		if isQuiet(st) {
			quietAhead += st.cost
		}
	}
	bound := 2*maxCost + quietAhead/time.Duration(mix.slots)
	for i, st := range mix.tenants {
		if isQuiet(st) && r.maxWait[i] > bound {
			r.violate("quiet tenant %d (%.0f jobs/s of %v) waited up to %v, want ≤ %v", i, st.rate, st.cost, r.maxWait[i], bound)
		}
	}
	return r
}

func removeJob(js []simJob, j simJob) []simJob {
	for i, x := range js {
		if x == j {
			return append(js[:i], js[i+1:]...)
		}
	}
	return js
}

// randomMix makes a mix of quiet tenants and a few saturating ones, with
// random weights, costs, fair-rate marks, ceilings and classes.
func randomMix(rng *rand.Rand) simMix {
	mix := simMix{slots: 1 + rng.IntN(16), run: 6 * time.Second}
	quiet := 1 + rng.IntN(20)
	noisy := 1 + rng.IntN(4)
	for range quiet {
		cost := time.Duration(5+rng.IntN(40)) * time.Millisecond
		mix.tenants = append(mix.tenants, simTenant{weight: float64(1 + rng.IntN(4)), cost: cost, fairRate: 1000})
	}
	for range noisy {
		st := simTenant{weight: float64(1 + rng.IntN(4)), cost: time.Duration(5+rng.IntN(100)) * time.Millisecond}
		switch rng.IntN(4) {
		case 0:
			st.fairRate = 1 + rng.Float64()*20 // over its fair rate: still served
		case 1:
			st.maxInFlight = 1 + rng.IntN(mix.slots)
		case 2:
			st.class = Class(rng.IntN(int(numClasses)))
		}
		mix.tenants = append(mix.tenants, st)
	}
	// Quiet tenants together offer a quarter of the slots, each at most a
	// quarter of its weighted share; noisy ones offer 1.5–4× all of them.
	totalWeight := 0.0
	for _, st := range mix.tenants {
		totalWeight += st.weight
	}
	for i := range mix.tenants {
		st := &mix.tenants[i]
		slots := float64(mix.slots)
		if i < quiet {
			st.rate = min(slots/4/float64(quiet), slots*st.weight/totalWeight/4) / st.cost.Seconds()
		} else {
			st.rate = slots * (1.5 + 2.5*rng.Float64()) / st.cost.Seconds()
		}
		st.id = fmt.Sprintf("t%d", i)
	}
	return mix
}

func TestSimulationRandomMixes(t *testing.T) {
	t.Parallel()
	mixes := 60
	if testing.Short() {
		mixes = 15
	}
	for seed := range mixes {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		mix := randomMix(rng)
		r := simulate(mix, newSchedPolicy(t, mix))
		if len(r.violations) > 0 {
			t.Errorf("seed %d (%d slots, %d tenants): %v", seed, mix.slots, len(mix.tenants), r.violations)
		}
	}
}

// TestSimulationFindsLegacyViolations shows the checks bite: the previous
// rules hold an over-rate tenant back while slots are idle and ignore
// worker time.
func TestSimulationFindsLegacyViolations(t *testing.T) {
	t.Parallel()
	found := 0
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		mix := randomMix(rng)
		if r := simulate(mix, newLegacyPolicy(mix)); len(r.violations) > 0 {
			found++
		}
	}
	if found < 10 {
		t.Errorf("the legacy model violated the properties in %d of 20 mixes; the checks should catch most", found)
	}
}

// TestSimulationScenarios pins the cases the benchmarks measure.
func TestSimulationScenarios(t *testing.T) {
	t.Parallel()
	quiet := func(n int, rate float64, cost time.Duration) []simTenant {
		var ts []simTenant
		for range n {
			ts = append(ts, simTenant{weight: 1, rate: rate, cost: cost, fairRate: 20})
		}
		return ts
	}
	noisy := func(n int, rate float64, cost time.Duration) []simTenant {
		var ts []simTenant
		for range n {
			ts = append(ts, simTenant{weight: 1, rate: rate, cost: cost, fairRate: 20})
		}
		return ts
	}
	tests := []struct {
		name    string
		mix     simMix
		minUtil float64 // delivered worker time ÷ slot time
		// legacyFails: the previous rules violate a property here.
		legacyFails bool
		checkLog    func(t *testing.T, mix simMix, r simResult)
	}{
		{
			name: "1 noisy among 9 quiet", minUtil: 0.97, legacyFails: true,
			mix: simMix{slots: 16, run: 20 * time.Second, tenants: append(quiet(9, 20, 40*time.Millisecond), noisy(1, 400, 40*time.Millisecond)...)},
		},
		{
			name: "10 noisy among 40", minUtil: 0.97,
			mix: simMix{slots: 16, run: 20 * time.Second, tenants: append(quiet(30, 6, 40*time.Millisecond), noisy(10, 400, 40*time.Millisecond)...)},
		},
		{
			name: "a slow tenant gets its weight's worker time", minUtil: 0.97,
			mix: simMix{slots: 16, run: 20 * time.Second, tenants: []simTenant{
				{weight: 1, rate: 1000, cost: 10 * time.Millisecond},
				{weight: 1, rate: 1000, cost: 100 * time.Millisecond},
			}},
			checkLog: func(t *testing.T, mix simMix, r simResult) {
				if ratio := r.work[1].Seconds() / r.work[0].Seconds(); math.Abs(ratio-1) > 0.1 {
					t.Errorf("slow tenant's worker time ÷ fast tenant's = %.2f, want 1 ± 0.1", ratio)
				}
			},
		},
		{
			name: "weights 1:3", minUtil: 0.97,
			mix: simMix{slots: 16, run: 20 * time.Second, tenants: []simTenant{
				{weight: 1, rate: 1000, cost: 40 * time.Millisecond},
				{weight: 3, rate: 1000, cost: 40 * time.Millisecond},
			}},
			checkLog: func(t *testing.T, mix simMix, r simResult) {
				if ratio := r.work[1].Seconds() / r.work[0].Seconds(); math.Abs(ratio-3)/3 > 0.1 {
					t.Errorf("worker time ratio %.2f, want 3 ± 10 %%", ratio)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for i := range tt.mix.tenants {
				tt.mix.tenants[i].id = fmt.Sprintf("t%d", i)
			}
			r := simulate(tt.mix, newSchedPolicy(t, tt.mix))
			if len(r.violations) > 0 {
				t.Errorf("violations: %v", r.violations)
			}
			var work time.Duration
			for _, w := range r.work {
				work += w
			}
			if util := work.Seconds() / (float64(tt.mix.slots) * tt.mix.run.Seconds()); util < tt.minUtil {
				t.Errorf("utilization %.3f, want ≥ %.2f", util, tt.minUtil)
			}
			if tt.checkLog != nil {
				tt.checkLog(t, tt.mix, r)
			}
			if tt.legacyFails {
				if lr := simulate(tt.mix, newLegacyPolicy(tt.mix)); len(lr.violations) == 0 {
					t.Errorf("the legacy model shows no violation here")
				}
			}
		})
	}
}

// simulateChecked names ts t0, t1, … and runs them through the Scheduler
// on slots for run, failing t on any property the simulation checks.
func simulateChecked(t *testing.T, slots int, run time.Duration, ts []simTenant) simResult {
	t.Helper()
	for i := range ts {
		ts[i].id = fmt.Sprintf("t%d", i)
	}
	mix := simMix{slots: slots, run: run, tenants: ts}
	r := simulate(mix, newSchedPolicy(t, mix))
	if len(r.violations) > 0 {
		t.Errorf("violations: %v", r.violations)
	}
	return r
}

// TestSimulationQuietWaitFloor runs the fairness bench's mix (9 quiet
// tenants at 20 jobs/s from random phases, noisy tenants at 400/s over a
// fair-rate mark of 20/s, spilled work coming back, 16 slots, jobs of
// 40 ms ± 25 %) through the scheduler alone, with no I/O. A quiet job
// still waits for a busy slot to finish, since no job is preempted: the
// percentiles it logs are the floor under the bench's quiet dwell, and the
// p99 must stay within half a job's time.
func TestSimulationQuietWaitFloor(t *testing.T) {
	t.Parallel()
	const cost = 40 * time.Millisecond
	for _, noisy := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d noisy", noisy), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(noisy)))
			var ts []simTenant
			for range 9 {
				ts = append(ts, simTenant{
					weight: 1, rate: 20, cost: cost, fairRate: 100, spread: 0.25,
					phase: time.Duration(rng.Int64N(int64(50 * time.Millisecond))),
				})
			}
			for range noisy {
				ts = append(ts, simTenant{weight: 1, rate: 400, cost: cost, fairRate: 20, spread: 0.25})
			}
			ts = append(ts, simTenant{weight: 1, rate: 100, cost: cost, fairRate: 20, spread: 0.25, class: Spillover})
			r := simulateChecked(t, 16, 20*time.Second, ts)
			var waits []time.Duration
			for i := range 9 {
				waits = append(waits, r.waits[i]...)
			}
			slices.Sort(waits)
			p := func(q float64) time.Duration { return waits[int(q*float64(len(waits)-1))] }
			t.Logf("quiet waits for a slot: p50 %v, p90 %v, p99 %v, max %v (%d jobs)", p(0.5), p(0.9), p(0.99), waits[len(waits)-1], len(waits))
			if p(0.99) > cost/2 {
				t.Errorf("quiet p99 wait %v, want ≤ %v", p(0.99), cost/2)
			}
		})
	}
}

// TestSimulationSlowTenantStartUp runs the slow-tenant bench's mix: 9
// quiet tenants beside a fast and a 10× slower saturating tenant, whose
// fair-rate marks come with bursts. At start-up the slow tenant's cost is
// not yet known and the fast one's burst has run ahead in virtual time;
// the slow one must still not take most of the slots for its long jobs,
// or the quiet tenants wait for them: their p99 wait in the first second
// must stay within that of the rest of the run, plus a fast job's time.
func TestSimulationSlowTenantStartUp(t *testing.T) {
	t.Parallel()
	const cost = 40 * time.Millisecond
	rng := rand.New(rand.NewPCG(5, 6))
	var ts []simTenant
	for range 9 {
		ts = append(ts, simTenant{
			weight: 1, rate: 20, cost: cost, fairRate: 100, fairBurst: 100, spread: 0.25,
			phase: time.Duration(rng.Int64N(int64(50 * time.Millisecond))),
		})
	}
	ts = append(ts,
		simTenant{weight: 1, rate: 400, cost: cost, fairRate: 20, fairBurst: 20, spread: 0.25, phase: time.Millisecond},
		simTenant{weight: 1, rate: 100, cost: 10 * cost, fairRate: 2, fairBurst: 2, spread: 0.25, phase: time.Millisecond})
	const run = 10 * time.Second
	r := simulateChecked(t, 16, run, ts)
	var early, late []time.Duration
	for i := range 9 {
		for k, w := range r.waits[i] {
			if at := r.arrivals[i][k]; at < time.Second {
				early = append(early, w)
			} else {
				late = append(late, w)
			}
		}
	}
	p99 := func(ws []time.Duration) time.Duration {
		slices.Sort(ws)
		return ws[int(0.99*float64(len(ws)-1))]
	}
	if ratio := r.work[10].Seconds() / r.work[9].Seconds(); math.Abs(ratio-1) > 0.1 {
		t.Errorf("slow tenant's worker time ÷ fast tenant's = %.2f, want 1 ± 0.1", ratio)
	}
	// The slow tenant's slots at start-up: at most one more than its mean.
	if mean := r.work[10].Seconds() / run.Seconds(); float64(r.peakEarly[10]) > mean+1 {
		t.Errorf("the slow tenant ran up to %d jobs at once in the first second, against %.1f on average", r.peakEarly[10], mean)
	}
	e, l := p99(early), p99(late)
	t.Logf("quiet p99 wait: first second %v, after %v", e, l)
	if e > l+cost/4 {
		t.Errorf("quiet p99 wait in the first second %v, want ≤ %v (the rest of the run's %v + %v)", e, l+cost/4, l, cost/4)
	}
}
