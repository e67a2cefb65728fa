package sideliner

import "time"

// LookoutWindowDefault is how long a quiet tenant, once seen, keeps the
// drainer reading past full tenants: one that sends a job every few
// seconds stays known in between.
const LookoutWindowDefault = 10 * time.Second

// lookoutRecheck is how often old sightings are dropped.
const lookoutRecheck = 100 * time.Millisecond

// Lookout tells, for one shard queue, whether reading past tenants whose
// read-ahead is full is worth its moves: whether rule 5 of Decide (Spill)
// should be applied at all. Moving a shard's jobs aside finds only that
// shard's, so the drainer keeps one Lookout per shard.
//
// A spill costs a send and a delete now, and a receive and a delete later.
// What it buys is sight of the jobs behind it, which pays only if some
// tenant is short of held jobs: a quiet tenant, whose next job may stand
// behind the flood, or one whose share the full tenants crowd out of the
// read-ahead (a heavier weight, shorter jobs). Lookout calls a tenant
// quiet when a job of it was read, within Window, while the tenant held
// less than a quarter of its budget, and none was read since while it
// held more. When no tenant is quiet, all of them are
// backlogged alike: moving one's jobs aside only delays them and doubles
// the store's work, so the drainer holds the job instead and reads on as
// the budgets free room (and, as a probe, now and then, so that a tenant
// never seen before is found).
//
// A tenant's first jobs are read while it holds none, so a new flood is
// quiet until it holds a quarter of its budget; from then on it is not.
// So is a backlogged tenant whose read-ahead ran low for a moment: it
// counted as quiet until its read-ahead was full again, and in a backlog
// of 10 tenants drained at once the moves it caused took a quarter of
// the jobs aside (the drain benchmark).
//
// A Lookout is pure logic: time is an input. It is not safe for
// concurrent use; the drainer calls it under its lock.
type Lookout struct {
	// Window is how long a quiet sighting counts. Defaults to
	// LookoutWindowDefault.
	Window time.Duration

	tenants map[string]sighting
	quiet   int       // tenants whose last sighting was low, within Window or until the next sweep
	swept   time.Time // when sightings older than Window were last dropped
}

// sighting is when a tenant's job was last read while the tenant held few
// jobs, and last read while it held more.
type sighting struct{ low, more time.Time }

func (s sighting) quiet() bool { return s.low.After(s.more) }

// Saw records that a fresh job of tenant was read at now while the tenant
// held held fresh jobs against a budget of budget, and reports whether its
// read-ahead is full (held ≥ budget).
func (l *Lookout) Saw(now time.Time, tenant string, held, budget int) (full bool) {
	full = held >= budget
	low := held < budget/4 || held == 0
	l.sweep(now)
	s := l.tenants[tenant]
	if !full && !low && !s.quiet() {
		// Neither short of jobs nor quiet before: nothing changes, and
		// the many sightings of a middling read-ahead add no entries.
		return false
	}
	if l.tenants == nil {
		l.tenants = make(map[string]sighting)
	}
	was := s.quiet()
	if low && !full {
		s.low = now
	} else {
		s.more = now // full, or no longer short of jobs
	}
	switch q := s.quiet(); {
	case q && !was:
		l.quiet++
	case !q && was:
		l.quiet--
	}
	l.tenants[tenant] = s
	return full
}

// Quiet reports whether some tenant is quiet at now (see Lookout).
func (l *Lookout) Quiet(now time.Time) bool {
	l.sweep(now)
	return l.quiet > 0
}

// sweep drops, at most every 100ms, the sightings older than Window.
func (l *Lookout) sweep(now time.Time) {
	if now.Sub(l.swept) < lookoutRecheck {
		return
	}
	l.swept = now
	window := l.Window
	if window <= 0 {
		window = LookoutWindowDefault
	}
	for t, s := range l.tenants {
		if now.Sub(s.low) > window && now.Sub(s.more) > window {
			if s.quiet() {
				l.quiet--
			}
			delete(l.tenants, t)
		}
	}
}
