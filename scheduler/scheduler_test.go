package scheduler

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func newSched(t *testing.T, slots int, limits map[string]Limits) *Scheduler[string] {
	t.Helper()
	s, err := New[string](Config{Slots: slots, ReadAhead: 4, Limits: func(id string) Limits { return limits[id] }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	limits := func(string) Limits { return Limits{} }
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no limits", Config{Slots: 1}},
		{"no slots", Config{Limits: limits}},
		{"sideline share 1", Config{Slots: 1, Limits: limits, SidelineShare: 1}},
		{"negative read-ahead", Config{Slots: 1, Limits: limits, ReadAhead: -1}},
	}
	for _, tt := range tests {
		if _, err := New[int](tt.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", tt.name, tt.cfg)
		}
	}
}

// grants pushes the given jobs, then grants until Next returns nil, and
// returns the granted items in order with their levels.
func grants(s *Scheduler[string], now time.Time) (items []string, levels []Level) {
	for {
		tk, _ := s.Next(now)
		if tk == nil {
			return items, levels
		}
		items = append(items, tk.Item)
		levels = append(levels, tk.Level)
	}
}

func TestLevels(t *testing.T) {
	t.Parallel()
	type push struct {
		tenant string
		class  Class
		item   string
	}
	tests := []struct {
		name   string
		slots  int
		limits map[string]Limits
		pushes []push
		want   []string
		levels []Level
	}{
		{
			name:  "fresh within share before spare and backlog",
			slots: 5,
			limits: map[string]Limits{
				"noisy": {FairRate: 1, FairBurst: 1},
			},
			pushes: []push{
				{"old", Backlog, "old-1"},
				{"noisy", Fresh, "noisy-1"},
				{"noisy", Fresh, "noisy-2"},
				{"quiet", Fresh, "quiet-1"},
				{"spill", Spillover, "spill-1"},
			},
			// The sideline share (1 of 5 slots) goes first, to spillover
			// before backlog; then in-share work, then spare work by
			// virtual time (noisy has had a job), then backlog.
			want:   []string{"spill-1", "noisy-1", "quiet-1", "noisy-2", "old-1"},
			levels: []Level{LevelSideline, LevelInShare, LevelInShare, LevelSpare, LevelBacklog},
		},
		{
			name:   "minimum share first",
			slots:  10,
			limits: map[string]Limits{"vip": {MinShare: 0.2}},
			pushes: []push{{"a", Fresh, "a-1"}, {"vip", Fresh, "vip-1"}, {"vip", Fresh, "vip-2"}, {"vip", Fresh, "vip-3"}},
			want:   []string{"vip-1", "vip-2", "a-1", "vip-3"},
			levels: []Level{LevelMinimum, LevelMinimum, LevelInShare, LevelInShare},
		},
		{
			name:   "a hard in-flight ceiling holds jobs back",
			slots:  10,
			limits: map[string]Limits{"capped": {MaxInFlight: 1}},
			pushes: []push{{"capped", Fresh, "c-1"}, {"capped", Fresh, "c-2"}, {"b", Fresh, "b-1"}},
			want:   []string{"c-1", "b-1"},
			levels: []Level{LevelInShare, LevelInShare},
		},
		{
			name:   "slots bound the grants",
			slots:  2,
			pushes: []push{{"a", Fresh, "a-1"}, {"a", Fresh, "a-2"}, {"a", Fresh, "a-3"}},
			want:   []string{"a-1", "a-2"},
			levels: []Level{LevelInShare, LevelInShare},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSched(t, tt.slots, tt.limits)
			for _, p := range tt.pushes {
				if !s.Push(t0, p.tenant, "lane", p.class, p.item) {
					t.Fatalf("push %s refused", p.item)
				}
			}
			items, levels := grants(s, t0)
			if !equal(items, tt.want) || !equal(levels, tt.levels) {
				t.Errorf("granted %v at %v, want %v at %v", items, levels, tt.want, tt.levels)
			}
		})
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReadAheadBudget(t *testing.T) {
	t.Parallel()
	s := newSched(t, 1, nil)
	for i := range 4 {
		if !s.Push(t0, "a", "lane", Fresh, "x") {
			t.Fatalf("push %d refused below the budget", i)
		}
	}
	if s.CanHold("a") || s.Push(t0, "a", "lane", Fresh, "x") {
		t.Fatal("push over the read-ahead budget accepted")
	}
	if !s.CanHold("b") || !s.Push(t0, "b", "lane", Fresh, "y") {
		t.Fatal("another tenant's push refused")
	}
	if !s.Push(t0, "a", "lane", Spillover, "z") {
		t.Fatal("a spillover push refused: only fresh jobs count against the budget")
	}
	if s.Held() != 6 || s.HeldIn(Fresh) != 5 {
		t.Fatalf("held %d (%d fresh), want 6 (5)", s.Held(), s.HeldIn(Fresh))
	}
}

func TestMaxRateCeilingReportsWait(t *testing.T) {
	t.Parallel()
	s := newSched(t, 4, map[string]Limits{"a": {MaxRate: 2, MaxBurst: 1}})
	s.Push(t0, "a", "lane", Fresh, "a-1")
	s.Push(t0, "a", "lane", Fresh, "a-2")
	if tk, _ := s.Next(t0); tk == nil || tk.Item != "a-1" {
		t.Fatalf("first grant %v, want a-1", tk)
	}
	tk, wait := s.Next(t0)
	if tk != nil || wait != 500*time.Millisecond {
		t.Fatalf("second grant %v, wait %v; want none for 500ms", tk, wait)
	}
	if tk, _ := s.Next(t0.Add(wait)); tk == nil || tk.Item != "a-2" {
		t.Fatalf("grant after the wait %v, want a-2", tk)
	}
}

// Worker time, not job count: the tenant whose job ran 10× longer is
// charged 10× and waits while the other catches up.
func TestDoneChargesWorkerTime(t *testing.T) {
	t.Parallel()
	s := newSched(t, 1, nil)
	s.Push(t0, "slow", "lane", Fresh, "s-1")
	s.Push(t0, "fast", "lane", Fresh, "f-1")
	now := t0
	run := func(used time.Duration) string {
		tk, _ := s.Next(now)
		now = now.Add(used)
		s.Done(now, tk, used)
		return tk.Item
	}
	if got := run(100 * time.Millisecond); got != "s-1" {
		t.Fatalf("first %s, want s-1", got)
	}
	for i := range 4 {
		s.Push(now, "slow", "lane", Fresh, "s")
		s.Push(now, "fast", "lane", Fresh, "f")
		// fast has had 0 worker time, slow 100ms: fast goes.
		if got := run(10 * time.Millisecond); got != "f-1" && got != "f" {
			t.Fatalf("round %d: %s, want a fast job", i, got)
		}
	}
}

func TestSidelineShareIsGuaranteed(t *testing.T) {
	t.Parallel()
	s := newSched(t, 10, nil)
	for range 4 {
		s.Push(t0, "a", "lane", Fresh, "fresh")
		s.Push(t0, "b", "lane", Backlog, "old")
	}
	items, _ := grants(s, t0)
	old := 0
	for _, it := range items {
		if it == "old" {
			old++
		}
	}
	// One slot (10 %) is guaranteed; the fresh work uses 4 of the rest and
	// the backlog gets the spare ones: 10 grants in all.
	if len(items) != 8 || old != 4 {
		t.Fatalf("granted %v; want all 8, every job deliverable", items)
	}
	if items[0] != "old" {
		t.Fatalf("first grant %s; the guaranteed share should go first", items[0])
	}
}

// TestSidelineShareComesWithoutBursts runs fresh work alone for a long
// stretch, then spilled work arrives beside it: the guaranteed sideline
// share must come as a steady tenth of the grants, never as a run that
// makes in-share fresh work wait. Owed its share over a long window, the
// sideline once took every grant for about 100 ms when spilled jobs
// first came back (issue 13), and that set the quiet tenants' p99.
func TestSidelineShareComesWithoutBursts(t *testing.T) {
	t.Parallel()
	const slots = 16
	s, err := New[string](Config{Slots: slots, Limits: func(string) Limits { return Limits{} }})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	grant := func() *Ticket[string] {
		t.Helper()
		for _, id := range []string{"a", "b"} {
			if s.HeldFresh(id) < 2 {
				s.Push(now, id, "lane", Fresh, id)
			}
		}
		tk, _ := s.Next(now)
		if tk == nil {
			t.Fatal("no grant with fresh work held and slots free")
		}
		now = now.Add(2500 * time.Microsecond) // 400 grants/s
		s.Done(now, tk, 40*time.Millisecond)
		return tk
	}
	for range 4000 { // 10 s of fresh work alone
		if tk := grant(); tk.Class != Fresh {
			t.Fatalf("granted %v with no sideline work held", tk.Class)
		}
	}
	for range 500 {
		s.Push(now, "noisy", "lane", Spillover, "spilled")
	}
	side, run, longest := 0, 0, 0
	const n = 200
	for range n {
		if tk := grant(); tk.Class == Fresh {
			run = 0
		} else {
			side++
			run++
			longest = max(longest, run)
		}
	}
	if want := int(SidelineShareDefault*n) + 2; side > want || side < int(SidelineShareDefault*n)-1 {
		t.Errorf("sideline work got %d of %d grants beside in-share fresh work; want its %.0f %% share, about %d",
			side, n, 100*SidelineShareDefault, int(SidelineShareDefault*n))
	}
	if longest > 2 {
		t.Errorf("sideline work took %d grants in a row while in-share fresh work waited; want at most 2", longest)
	}
}

func TestRemoveIfAndEach(t *testing.T) {
	t.Parallel()
	s := newSched(t, 1, nil)
	s.Push(t0, "a", "lane", Fresh, "a-1")
	s.Push(t0, "a", "lane", Spillover, "a-2")
	s.Push(t0, "b", "lane", Fresh, "b-1")
	var seen []string
	s.Each(func(_ string, _ Class, item string) { seen = append(seen, item) })
	if len(seen) != 3 {
		t.Fatalf("Each saw %v", seen)
	}
	got := s.RemoveIf(func(tenant string, _ Class, _ string) bool { return tenant == "a" })
	if len(got) != 2 || s.Held() != 1 || s.HeldIn(Spillover) != 0 {
		t.Fatalf("removed %v, held %d", got, s.Held())
	}
	if tk, _ := s.Next(t0); tk == nil || tk.Item != "b-1" {
		t.Fatalf("next after removal %v, want b-1", tk)
	}
}

func TestSweepForgetsIdleTenants(t *testing.T) {
	t.Parallel()
	s := newSched(t, 1, map[string]Limits{"a": {FairRate: 1, FairBurst: 1}})
	s.Push(t0, "a", "lane", Fresh, "a-1")
	tk, _ := s.Next(t0)
	if n := s.Sweep(t0.Add(time.Hour)); n != 0 {
		t.Fatalf("swept %d tenants with a job running", n)
	}
	s.Done(t0, tk, time.Millisecond)
	s.Done(t0, tk, time.Millisecond) // a second Done does nothing
	if s.Running() != 0 {
		t.Fatalf("running %d after Done twice", s.Running())
	}
	if n := s.Sweep(t0.Add(time.Minute)); n != 0 {
		t.Fatalf("swept %d before the idle TTL", n)
	}
	if n := s.Sweep(t0.Add(time.Hour)); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	s := newSched(t, 2, map[string]Limits{"big": {Weight: 3}})
	now := t0
	for range 50 {
		s.Push(now, "big", "lane", Fresh, "b")
		s.Push(now, "small", "lane", Fresh, "s")
		a, _ := s.Next(now)
		b, _ := s.Next(now)
		now = now.Add(100 * time.Millisecond)
		s.Done(now, a, 100*time.Millisecond)
		s.Done(now, b, 100*time.Millisecond)
	}
	st := s.Stats(now, 0)
	if len(st) != 1 || st[0].Group != "lane" {
		t.Fatalf("stats %+v", st)
	}
	g := st[0]
	// 2 jobs every 100ms for 5 s.
	if math.Abs(g.DeliveriesPerSecond-20) > 1 {
		t.Errorf("deliveries %.1f/s, want 20", g.DeliveriesPerSecond)
	}
	if g.Utilization < 0.99 {
		t.Errorf("utilization %.3f, want 1: both slots always busy", g.Utilization)
	}
	if len(g.Tenants) != 2 || math.Abs(g.Tenants[0].Share-0.5) > 0.01 {
		t.Errorf("tenants %+v; each got half the worker time", g.Tenants)
	}
	// Neither was backlogged (each job was granted at once), so both got
	// what they wanted: index 1.
	if math.Abs(g.Jain-1) > 1e-9 {
		t.Errorf("Jain %.3f, want 1", g.Jain)
	}
}

func TestJain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ts   []TenantStats
		want float64
	}{
		{"none", nil, -1},
		{"weighted 1:3, fair", []TenantStats{{Weight: 1, Share: 0.25, Backlogged: true}, {Weight: 3, Share: 0.75, Backlogged: true}}, 1},
		{"equal weights, one starved", []TenantStats{{Weight: 1, Share: 1, Backlogged: true}, {Weight: 1, Share: 0, Backlogged: true}}, 0.5},
		{"quiet tenant satisfied", []TenantStats{{Weight: 1, Share: 0.1}, {Weight: 1, Share: 0.9, Backlogged: true}}, 1},
	}
	for _, tt := range tests {
		if got := jain(tt.ts); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: jain = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// FuzzScheduler drives a scheduler with a byte tape of operations and
// checks its counts and work conservation after each.
func FuzzScheduler(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{0, 0, 0, 0, 3, 3, 3, 1, 2, 2, 2, 5, 5})
	f.Fuzz(func(t *testing.T, tape []byte) {
		limits := map[string]Limits{
			"a": {Weight: 2, FairRate: 5, FairBurst: 1},
			"b": {MaxInFlight: 1},
			"c": {MinShare: 0.3},
			"d": {MaxRate: 10, MaxBurst: 2},
		}
		s, err := New[int](Config{Slots: 3, ReadAhead: 5, Limits: func(id string) Limits { return limits[id] }})
		if err != nil {
			t.Fatal(err)
		}
		tenants := []string{"a", "b", "c", "d"}
		now := t0
		var running []*Ticket[int]
		held := map[string]int{}
		for i, op := range tape {
			tenant := tenants[int(op>>2)%len(tenants)]
			switch op % 4 {
			case 0, 1: // push
				if s.Push(now, tenant, "lane", Class(int(op>>4)%int(numClasses)), i) {
					held[tenant]++
				}
			case 2: // finish the oldest running job
				if len(running) > 0 {
					s.Done(now, running[0], time.Duration(op)*time.Millisecond)
					running = running[1:]
				}
			case 3:
				now = now.Add(time.Duration(op) * time.Millisecond)
			}
			for {
				tk, _ := s.Next(now)
				if tk == nil {
					break
				}
				held[tk.Tenant]--
				running = append(running, tk)
			}
			total := 0
			for _, n := range held {
				total += n
			}
			if s.Held() != total || s.Running() != len(running) || s.Running() > s.Slots() {
				t.Fatalf("op %d: held %d (want %d), running %d (want %d)", i, s.Held(), total, s.Running(), len(running))
			}
			if s.Running() < s.Slots() {
				inFlight := map[string]int{}
				for _, tk := range running {
					inFlight[tk.Tenant]++
				}
				for tenant, n := range held {
					l := limits[tenant]
					capped := (l.MaxInFlight > 0 && inFlight[tenant] >= l.MaxInFlight) || l.MaxRate > 0
					if n > 0 && !capped {
						t.Fatalf("op %d: a slot is free while %s has %d deliverable jobs", i, tenant, n)
					}
				}
			}
		}
	})
}

// A tenant's running job is charged for the time it runs past its
// estimate, before it ends: a tenant whose first jobs turn out slow does
// not take every slot while the scheduler still thinks them cheap.
func TestRunningJobsAreChargedAsTheyRun(t *testing.T) {
	t.Parallel()
	s := newSched(t, 8, nil)
	for range 4 {
		s.Push(t0, "slow", "lane", Fresh, "s")
		s.Push(t0, "fast", "lane", Fresh, "f")
	}
	first, _ := s.Next(t0) // slow's first job (activated first), estimated at 10ms
	if first.Tenant != "slow" {
		t.Fatalf("first grant to %s", first.Tenant)
	}
	second, _ := s.Next(t0)
	s.Done(t0.Add(10*time.Millisecond), second, 10*time.Millisecond)
	// 300ms later slow's job still runs: every free slot goes to fast.
	now := t0.Add(300 * time.Millisecond)
	for i := range 3 {
		tk, _ := s.Next(now)
		if tk == nil || tk.Tenant != "fast" {
			t.Fatalf("grant %d at 300ms went to %v; slow's running job has used 300ms", i, tk)
		}
	}
}

// Slots can drop to zero (no worker connected) and come back; a group
// (lane) limited to the slots of the workers serving it never takes more,
// and the other group gets the rest.
func TestGroupSlots(t *testing.T) {
	t.Parallel()
	s := newSched(t, 4, nil)
	for i := range 4 {
		s.Push(t0, "a", "premium", Fresh, "a"+string(rune('0'+i)))
		s.Push(t0, "b", "free", Fresh, "b"+string(rune('0'+i)))
	}
	s.SetSlots(0)
	if tk, _ := s.Next(t0); tk != nil {
		t.Fatalf("granted %s with no slots", tk.Item)
	}
	s.SetSlots(4)
	s.SetGroupSlots("premium", 1)
	var got []*Ticket[string]
	for {
		tk, _ := s.Next(t0)
		if tk == nil {
			break
		}
		got = append(got, tk)
	}
	perGroup := map[string]int{}
	for _, tk := range got {
		perGroup[tk.Group]++
	}
	if perGroup["premium"] != 1 || perGroup["free"] != 3 {
		t.Fatalf("granted per group %v, want premium 1 and free 3", perGroup)
	}
	// A premium job's end frees a premium slot only.
	for _, tk := range got {
		if tk.Group == "premium" {
			s.Done(t0, tk, time.Millisecond)
		}
	}
	tk, _ := s.Next(t0)
	if tk == nil || tk.Group != "premium" {
		t.Fatalf("after a premium job ended, Next = %v, want a premium job", tk)
	}
	s.SetGroupSlots("premium", -1)
	s.SetSlots(8)
	if items, _ := grants(s, t0); len(items) != 3 {
		t.Fatalf("with the limit removed, granted %v, want the 3 held", items)
	}
}

// A tenant may hold jobs of two groups (lanes) at once: after a reload
// moves it to another lane while its old lane's jobs still drain, or in a
// plain FIFO (the drainer's --sideline=false), where every lane's jobs are
// one tenant's. Each job counts against its own group's slots and held
// jobs. The scheduler used to take the group of the tenant's latest push
// for all its jobs: a job of a lane with no slot (no worker serves it) was
// granted on another lane's slot, and a job of an open lane was never
// granted while the tenant's latest push was to a closed one.
func TestTenantInTwoGroups(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		pushes     []string // group of each job, in push order; the item is the group too
		wantGroups []string // groups of the jobs granted, in order, while "closed" has no slot
	}{
		{"closed group's job first", []string{"closed", "open"}, nil},
		{"open group's job first", []string{"open", "closed"}, []string{"open"}},
		{"open jobs around a closed one", []string{"open", "closed", "open"}, []string{"open"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSched(t, 4, nil)
			s.SetGroupSlots("closed", 0)
			for _, g := range tt.pushes {
				s.Push(t0, "x", g, Fresh, g)
			}
			var got []string
			for {
				tk, _ := s.Next(t0)
				if tk == nil {
					break
				}
				if tk.Item != tk.Group {
					t.Fatalf("a job of group %q was granted as group %q", tk.Item, tk.Group)
				}
				got = append(got, tk.Group)
			}
			if !equal(got, tt.wantGroups) {
				t.Fatalf("granted jobs of groups %v, want %v", got, tt.wantGroups)
			}
			held := map[string]int{}
			for _, g := range s.Stats(t0, 0) {
				held[g.Group] = g.Held
			}
			if held["closed"] != 1 {
				t.Fatalf("held per group %v, want closed 1", held)
			}
			// The closed group's jobs are handed back: the open group's
			// are granted.
			s.RemoveIf(func(_ string, _ Class, item string) bool { return item == "closed" })
			open := 0
			for _, g := range tt.pushes {
				if g == "open" {
					open++
				}
			}
			items, _ := grants(s, t0)
			if len(got)+len(items) != open {
				t.Fatalf("after the closed group's job left, granted %v; want every open job granted (%d in all)", items, open)
			}
			for _, g := range s.Stats(t0, 0) {
				if g.Held != 0 {
					t.Fatalf("group %s holds %d after everything was granted or removed", g.Group, g.Held)
				}
			}
		})
	}
}

// A ticket given back with Cancel (its job never ran: it expired while
// held) frees the slot and teaches the scheduler nothing about the
// tenant's cost. Given back as Done with no worker time, it made the
// tenant's cost known and zero: every later grant of it was charged
// nothing, so it took every slot free at one instant ahead of tenants of
// the same weight, and lost the start-up cap of a tenant whose cost is
// still unknown.
func TestCancelLearnsNoCost(t *testing.T) {
	t.Parallel()
	s := newSched(t, 4, nil)
	for range 4 {
		s.Push(t0, "a", "lane", Fresh, "a")
		s.Push(t0, "b", "lane", Fresh, "b")
	}
	tk, _ := s.Next(t0)
	if tk == nil || tk.Tenant != "a" {
		t.Fatalf("first grant %v, want a's", tk)
	}
	s.Cancel(t0, tk)
	if s.Running() != 0 {
		t.Fatalf("running %d after the only grant was cancelled", s.Running())
	}
	items, _ := grants(s, t0)
	per := map[string]int{}
	for _, it := range items {
		per[it]++
	}
	if per["a"] != 2 || per["b"] != 2 {
		t.Fatalf("after a's cancelled grant, the 4 slots went %v; want 2 each (equal weights, costs unknown)", per)
	}
}
