package scheduler

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// scanChoice is the choice Next makes, found the way Next found it before
// the index: a look at every tenant holding work, in order of activation,
// each one's level worked out at now. It changes nothing. The index must
// choose the same tenant, level and class, and report the same wait.
func scanChoice[T any](s *Scheduler[T], now time.Time) (id string, level Level, class Class, wait time.Duration) {
	if s.running >= s.cfg.Slots || s.held == 0 {
		return "", levelNone, 0, 0
	}
	active := slices.Clone(s.active)
	slices.SortFunc(active, func(a, b *tenant[T]) int { return cmp.Compare(a.seq, b.seq) })
	sideOpen := s.heldClass[Spillover]+s.heldClass[Backlog] > 0 && s.sideCredit >= 1
	type candidate struct {
		t     *tenant[T]
		level Level
		class Class
		vt    float64
	}
	better := func(a, b candidate) bool {
		if a.level == LevelSideline && a.class != b.class {
			return a.class < b.class
		}
		return a.vt < b.vt
	}
	var cands []candidate
	best := -1
	var levelWeight float64
	levelRunning := 0
	for _, t := range active {
		if t.limits.MaxInFlight > 0 && t.inFlight >= t.limits.MaxInFlight {
			continue
		}
		if t.max != nil {
			if w := t.max.wait(now); w > 0 {
				if wait == 0 || w < wait {
					wait = w
				}
				continue
			}
		}
		c := candidate{t: t, vt: t.runningVT(now)}
		c.level, c.class = scanLevel(s, t, now, sideOpen)
		if g := s.groups[t.queues[c.class].peek().group]; g.limited && g.running >= g.slots {
			continue
		}
		cands = append(cands, c)
		switch {
		case best >= 0 && c.level > cands[best].level:
			continue
		case best < 0 || c.level < cands[best].level:
			best, levelWeight, levelRunning = len(cands)-1, 0, 0
		case better(c, cands[best]):
			best = len(cands) - 1
		}
		levelWeight += t.weight
		levelRunning += t.inFlight
	}
	if best < 0 {
		return "", levelNone, 0, wait
	}
	b := cands[best]
	if b.level >= LevelSpare && !b.t.costKnown {
		perWeight := float64(s.cfg.Slots-(s.running-levelRunning)) / levelWeight
		if probeCapped(b.t, perWeight) {
			other := -1
			for i, c := range cands {
				if c.level == b.level && !probeCapped(c.t, perWeight) && (other < 0 || better(c, cands[other])) {
					other = i
				}
			}
			if other >= 0 {
				b = cands[other]
			}
		}
	}
	return b.t.id, b.level, b.class, 0
}

// scanLevel is the level and class t qualifies for at now, worked out
// from its state alone.
func scanLevel[T any](s *Scheduler[T], t *tenant[T], now time.Time, sideOpen bool) (Level, Class) {
	if t.limits.MinShare > 0 && t.inFlight < share(t.limits.MinShare, s.cfg.Slots) {
		return LevelMinimum, t.firstClass()
	}
	spill, backlog := t.queues[Spillover].len() > 0, t.queues[Backlog].len() > 0
	switch {
	case sideOpen && spill:
		return LevelSideline, Spillover
	case sideOpen && backlog:
		return LevelSideline, Backlog
	case t.queues[Fresh].len() > 0 && (t.fair == nil || t.fair.wait(now) == 0):
		return LevelInShare, Fresh
	case t.queues[Fresh].len() > 0:
		return LevelSpare, Fresh
	case spill:
		return LevelSpare, Spillover
	}
	return LevelBacklog, Backlog
}

// checkAgainstScan runs the operations tape spells out on a scheduler of
// varied tenants (weights, guaranteed shares, fair rates, hard ceilings,
// two lanes with slot limits), and checks before every grant that the
// index chooses what a scan of every tenant chooses.
func checkAgainstScan(t *testing.T, tape []byte) {
	t.Helper()
	limits := map[string]Limits{}
	s, err := New[int](Config{Slots: 4, ReadAhead: 6, Limits: func(id string) Limits { return limits[id] }})
	if err != nil {
		t.Fatal(err)
	}
	tenants := make([]string, 12)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t%02d", i)
	}
	pick := func(b byte, options ...float64) float64 { return options[int(b)%len(options)] }
	setLimits := func(id string, b byte) {
		limits[id] = Limits{
			Weight:      pick(b, 1, 2, 3, 0),
			MinShare:    pick(b>>1, 0, 0, 0.25),
			FairRate:    pick(b>>2, 0, 50, 400),
			FairBurst:   int(b>>3) % 3,
			MaxRate:     pick(b>>4, 0, 0, 0, 100),
			MaxBurst:    int(b>>5)%2 + 1,
			MaxInFlight: int(pick(b>>6, 0, 0, 1, 2)),
		}
	}
	for i, id := range tenants {
		setLimits(id, byte(i*37))
	}
	now := t0
	var running []*Ticket[int]
	for i := 0; i+1 < len(tape); i += 2 {
		op, arg := tape[i], tape[i+1]
		id := tenants[int(arg)%len(tenants)]
		switch op % 10 {
		case 0, 1, 2: // push
			s.Push(now, id, []string{"a", "b"}[arg>>7], Class(int(op>>4)%int(numClasses)), i)
		case 3: // a job ends
			if len(running) > 0 {
				k := int(arg) % len(running)
				s.Done(now, running[k], time.Duration(op)*100*time.Microsecond)
				running = slices.Delete(running, k, k+1)
			}
		case 4: // a job is given back unrun
			if len(running) > 0 {
				k := int(arg) % len(running)
				s.Cancel(now, running[k])
				running = slices.Delete(running, k, k+1)
			}
		case 5, 6:
			now = now.Add(time.Duration(arg) * 100 * time.Microsecond)
		case 7:
			s.SetSlots(int(arg) % 7)
		case 8:
			s.SetGroupSlots([]string{"a", "b"}[arg&1], int(arg>>1)%5-1)
		case 9:
			if arg&1 == 0 {
				setLimits(id, op^arg)
				s.Refresh(now)
			} else {
				s.RemoveIf(func(_ string, _ Class, item int) bool { return item%7 == int(arg)%7 })
			}
		}
		for {
			wantTenant, wantLevel, wantClass, wantWait := scanChoice(s, now)
			tk, wait := s.Next(now)
			if tk == nil {
				if wantTenant != "" || wait != wantWait {
					t.Fatalf("op %d: Next granted nothing, wait %v; a scan grants %q (%v, %v), wait %v", i/2, wait, wantTenant, wantLevel, wantClass, wantWait)
				}
				break
			}
			if tk.Tenant != wantTenant || tk.Level != wantLevel || tk.Class != wantClass {
				t.Fatalf("op %d: Next granted %s (%v, %v); a scan grants %q (%v, %v)", i/2, tk.Tenant, tk.Level, tk.Class, wantTenant, wantLevel, wantClass)
			}
			running = append(running, tk)
		}
	}
}

// The index chooses exactly what a look at every tenant would, over long
// random runs of pushes, grants, ends, cancels, new slots, lane limits,
// new limits and removals.
func TestIndexChoosesAsAScanWould(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 17))
		tape := make([]byte, 4000)
		for i := range tape {
			tape[i] = byte(rng.Uint32())
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkAgainstScan(t, tape) })
	}
}

func FuzzIndexChoosesAsAScanWould(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 16, 3, 32, 4, 5, 40, 3, 0, 7, 2, 8, 3, 9, 4})
	f.Fuzz(checkAgainstScan)
}
