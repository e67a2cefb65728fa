package scheduler

import (
	"math"
	"slices"
	"time"
)

// decayed is a sum whose past contributions fade with statsHalfLife, so
// figures show the last tens of seconds, not the process's whole life.
type decayed struct{ v float64 }

func (d *decayed) add(x float64)        { d.v += x }
func (d *decayed) decay(factor float64) { d.v *= factor }

// fading is a decayed sum kept per tenant, decayed lazily when read or
// added to, so that time passing costs nothing for tenants not touched.
type fading struct {
	v  float64
	at time.Time // when v was last brought up to date
}

func (f *fading) value(now time.Time) float64 {
	if f.at.IsZero() || !now.After(f.at) {
		return f.v
	}
	return f.v * math.Exp2(-now.Sub(f.at).Seconds()/statsHalfLife.Seconds())
}

func (f *fading) add(now time.Time, x float64) {
	f.v = f.value(now) + x
	if now.After(f.at) {
		f.at = now
	}
}

type groupStats struct {
	held         int     // jobs held now
	running      int     // jobs granted and not yet Done
	slots        int     // most jobs running at once, when limited
	limited      bool    // SetGroupSlots set a limit
	busy, demand decayed // slot-seconds busy, and offered, while work waited
	finished     decayed // delivery attempts done
}

func (s *Scheduler[T]) group(name string) *groupStats {
	g := s.groups[name]
	if g == nil {
		g = &groupStats{}
		s.groups[name] = g
	}
	return g
}

// advance accounts the time since the last call: slot use while each
// group's work waited, and each active tenant's waiting time; then it
// decays every figure. Times before the last are treated as the last.
func (s *Scheduler[T]) advance(now time.Time) {
	if s.last.IsZero() || !now.After(s.last) {
		if s.last.IsZero() {
			s.last, s.first = now, now
		}
		return
	}
	dt := now.Sub(s.last).Seconds()
	s.last = now
	factor := math.Exp2(-dt / statsHalfLife.Seconds())
	saturated := s.running >= s.cfg.Slots
	for _, g := range s.groups {
		g.busy.decay(factor)
		g.demand.decay(factor)
		g.finished.decay(factor)
		if g.held > 0 || saturated {
			g.busy.add(dt * float64(s.running))
			g.demand.add(dt * float64(s.cfg.Slots))
		}
	}
}

// State is what a tenant's scheduling looks like at one instant.
type State string

// States, most constrained first.
const (
	StateCapped    State = "capped"    // at a hard ceiling (max_in_flight, max_drain_rate)
	StateSidelined State = "sidelined" // has spillover or backlog jobs waiting
	StateOverRate  State = "over_rate" // past its fair rate: served after those within theirs
	StateInShare   State = "in_share"  // within its fair rate
)

// TenantStats are one tenant's recent figures.
type TenantStats struct {
	Tenant string
	Weight float64
	// Share is the tenant's share of its group's recent worker time.
	Share    float64
	State    State
	InFlight int
	Held     int
	// Backlogged means the tenant had jobs waiting for most of the
	// recent window: it wanted more than it got.
	Backlogged bool
}

// GroupStats are one group's (lane's) recent fairness figures.
type GroupStats struct {
	Group string
	// Utilization is busy slots ÷ slots over the recent window, counted
	// while the group's jobs waited (or every slot was busy). 1 means no
	// slot was idle while this group's work waited. -1 when its work
	// waited less than half a second in the window.
	Utilization float64
	// Jain is Jain's fairness index over the active tenants' weighted
	// worker-time shares, each against its weighted max-min fair share:
	// 1 when every tenant got its fair share. -1 with no active tenant.
	Jain float64
	// Tenants lists the active tenants by worker-time share, largest first.
	Tenants []TenantStats
	// DeliveriesPerSecond is the recent rate of delivery attempts done.
	DeliveriesPerSecond float64
	Held                int
}

// Stats returns each group's figures at now, tenants active in the last
// minute or so only; top limits each group's tenant list (≤ 0: all).
func (s *Scheduler[T]) Stats(now time.Time, top int) []GroupStats {
	s.advance(now)
	byGroup := map[string][]*tenant[T]{}
	for id, t := range s.recent {
		if t.held == 0 && t.inFlight == 0 && t.work.value(now) < 1e-6 {
			delete(s.recent, id) // faded out
			continue
		}
		byGroup[t.group] = append(byGroup[t.group], t)
	}
	for _, t := range s.active {
		if _, ok := s.recent[t.id]; !ok {
			byGroup[t.group] = append(byGroup[t.group], t)
		}
	}
	var out []GroupStats
	for name, g := range s.groups {
		gs := GroupStats{Group: name, Utilization: -1, Jain: -1, Held: g.held, DeliveriesPerSecond: s.rate(g.finished.v, now)}
		// Under half a second of work waiting in the window says nothing
		// about idle workers (a job held for the millisecond before its
		// grant is not a wait): unknown, not 0.
		if s.cfg.Slots > 0 && g.demand.v >= 0.5*float64(s.cfg.Slots) {
			gs.Utilization = min(g.busy.v/g.demand.v, 1)
		}
		ts := byGroup[name]
		total := 0.0
		for _, t := range ts {
			total += t.work.value(now)
		}
		for _, t := range ts {
			st := TenantStats{
				Tenant: t.id, Weight: t.weight, State: s.state(t, now), InFlight: t.inFlight, Held: t.held,
				Backlogged: t.held > 0 || t.waitingAt(now) > 0.5*window(),
			}
			if total > 0 {
				st.Share = t.work.value(now) / total
			}
			gs.Tenants = append(gs.Tenants, st)
		}
		gs.Jain = jain(gs.Tenants)
		slices.SortFunc(gs.Tenants, func(a, b TenantStats) int {
			if a.Share != b.Share {
				if a.Share > b.Share {
					return -1
				}
				return 1
			}
			if a.Tenant < b.Tenant {
				return -1
			}
			return 1
		})
		if top > 0 && len(gs.Tenants) > top {
			gs.Tenants = gs.Tenants[:top]
		}
		out = append(out, gs)
	}
	slices.SortFunc(out, func(a, b GroupStats) int {
		if a.Group < b.Group {
			return -1
		}
		return 1
	})
	return out
}

// rate turns a decayed count into a rate per second: over a window that
// has not yet run a full half-life's worth since the first reading, the
// decayed count is divided by what has elapsed, not by the whole window.
func (s *Scheduler[T]) rate(count float64, now time.Time) float64 {
	elapsed := now.Sub(s.first).Seconds()
	if s.first.IsZero() || elapsed <= 0 {
		return 0
	}
	return count / (window() * (1 - math.Exp2(-elapsed/statsHalfLife.Seconds())))
}

// window is the effective length of a decayed sum of a constant 1/s.
func window() float64 { return statsHalfLife.Seconds() / math.Ln2 }

func (s *Scheduler[T]) state(t *tenant[T], now time.Time) State {
	switch {
	case t.limits.MaxInFlight > 0 && t.inFlight >= t.limits.MaxInFlight,
		t.max != nil && tokenWait(t.max, now) > 0:
		return StateCapped
	case t.queues[Spillover].len() > 0 || t.queues[Backlog].len() > 0:
		return StateSidelined
	case t.fair != nil && tokenWait(t.fair, now) > 0:
		return StateOverRate
	}
	return StateInShare
}

// jain computes Jain's index (Σx)²/(n·Σx²) of x = share ÷ fair share, where
// the fair share is weighted max-min: a tenant that was not backlogged
// wanted no more than it got (x = 1), and the backlogged ones split the
// rest by weight.
func jain(ts []TenantStats) float64 {
	if len(ts) == 0 {
		return -1
	}
	rest, weights := 1.0, 0.0
	for _, t := range ts {
		if t.Backlogged {
			weights += t.Weight
		} else {
			rest -= t.Share
		}
	}
	var sum, sumSq float64
	for _, t := range ts {
		x := 1.0
		if t.Backlogged && weights > 0 {
			fair := max(rest, 0) * t.Weight / weights
			if fair > 0 {
				x = t.Share / fair
			} else {
				x = 0
			}
		}
		sum += x
		sumSq += x * x
	}
	if sumSq == 0 {
		return 1
	}
	return sum * sum / (float64(len(ts)) * sumSq)
}

// waitingAt is the tenant's recent time with jobs held, the current
// stretch included.
func (t *tenant[T]) waitingAt(now time.Time) float64 {
	w := t.waiting.value(now)
	if t.held > 0 && now.After(t.heldSince) {
		w += now.Sub(t.heldSince).Seconds()
	}
	return w
}
