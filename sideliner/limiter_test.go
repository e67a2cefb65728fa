package sideliner

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// limitsTable is a caller's tenant configuration that tests can change.
type limitsTable struct {
	mu sync.Mutex
	m  map[string]Limits
	d  Limits // for tenants not in m
}

func (lt *limitsTable) get(tenant string) Limits {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if l, ok := lt.m[tenant]; ok {
		return l
	}
	return lt.d
}

func (lt *limitsTable) set(tenant string, l Limits) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.m[tenant] = l
}

type limiterBundle struct {
	limits *limitsTable
}

func setupLimiter(t *testing.T, def Limits, idleTTL time.Duration) (*Limiter, *limiterBundle) {
	t.Helper()
	b := &limiterBundle{limits: &limitsTable{m: map[string]Limits{}, d: def}}
	l, err := NewLimiter(LimiterConfig{Limits: b.limits.get, IdleTTL: idleTTL})
	if err != nil {
		t.Fatal(err)
	}
	return l, b
}

func mustAcquire(t *testing.T, l *Limiter, tenant string, now time.Time) func() {
	t.Helper()
	release, ok, st := l.Acquire(tenant, now)
	if !ok {
		t.Fatalf("Acquire(%q, %v) refused: %+v", tenant, now.Sub(t0), st)
	}
	return release
}

func mustRefuse(t *testing.T, l *Limiter, tenant string, now time.Time, want Status) {
	t.Helper()
	release, ok, st := l.Acquire(tenant, now)
	release() // a no-op when refused
	if ok {
		t.Fatalf("Acquire(%q, %v) succeeded, want refused with %+v", tenant, now.Sub(t0), want)
	}
	if st != want {
		t.Fatalf("Acquire(%q, %v) status = %+v, want %+v", tenant, now.Sub(t0), st, want)
	}
}

func TestNewLimiter(t *testing.T) {
	t.Parallel()
	if _, err := NewLimiter(LimiterConfig{}); err == nil {
		t.Error("NewLimiter without Limits: want an error")
	}
	if _, err := NewLimiter(LimiterConfig{Limits: func(string) Limits { return Limits{} }, IdleTTL: -1}); err == nil {
		t.Error("NewLimiter with negative IdleTTL: want an error")
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()

	t.Run("rate: burst then refill", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 10, DrainBurst: 2}, 0)
		mustAcquire(t, l, "a", t0)()
		mustAcquire(t, l, "a", t0)()
		mustRefuse(t, l, "a", t0, Status{OverRate: true, Wait: 100 * time.Millisecond})
		mustRefuse(t, l, "a", t0.Add(99*time.Millisecond), Status{OverRate: true, Wait: time.Millisecond})
		mustAcquire(t, l, "a", t0.Add(100*time.Millisecond))()
		if st := l.Check("b", t0); st != (Status{}) {
			t.Fatalf("other tenant: Check = %+v, want within limits", st)
		}
	})

	t.Run("concurrency: slots and idempotent release", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{MaxInFlight: 2}, 0)
		r1 := mustAcquire(t, l, "a", t0)
		r2 := mustAcquire(t, l, "a", t0)
		mustRefuse(t, l, "a", t0, Status{AtConcurrency: true, InFlight: 2})
		r1()
		r1() // idempotent: must not free r2's slot
		if st := l.Check("a", t0); st != (Status{InFlight: 1}) {
			t.Fatalf("after double release: Check = %+v, want InFlight 1", st)
		}
		r3 := mustAcquire(t, l, "a", t0)
		mustRefuse(t, l, "a", t0, Status{AtConcurrency: true, InFlight: 2})
		r2()
		r3()
		if st := l.Check("a", t0); st != (Status{}) {
			t.Fatalf("after releases: Check = %+v, want zero", st)
		}
	})

	t.Run("refused at concurrency consumes no token", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1, MaxInFlight: 1}, 0)
		r := mustAcquire(t, l, "a", t0)
		mustRefuse(t, l, "a", t0.Add(time.Second), Status{AtConcurrency: true, InFlight: 1})
		mustRefuse(t, l, "a", t0.Add(time.Second), Status{AtConcurrency: true, InFlight: 1})
		r()
		mustAcquire(t, l, "a", t0.Add(time.Second)) // the token refilled at 1s is still there
	})

	t.Run("refused over rate takes no slot", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1, MaxInFlight: 1}, 0)
		mustAcquire(t, l, "a", t0)()
		mustRefuse(t, l, "a", t0, Status{OverRate: true, Wait: time.Second})
		if st := l.Check("a", t0); st.InFlight != 0 {
			t.Fatalf("InFlight = %d after a refused Acquire, want 0", st.InFlight)
		}
	})

	t.Run("both limits: both reported, over rate first", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 2, DrainBurst: 1, MaxInFlight: 1}, 0)
		r := mustAcquire(t, l, "a", t0)
		defer r()
		want := Status{OverRate: true, AtConcurrency: true, Wait: 500 * time.Millisecond, InFlight: 1}
		mustRefuse(t, l, "a", t0, want)
		if got := l.Check("a", t0).Reason(); got != ReasonOverRate {
			t.Fatalf("Reason = %q, want over_rate", got)
		}
	})

	t.Run("check consumes nothing and creates no state", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1, MaxInFlight: 1}, 0)
		for range 10 {
			if st := l.Check("a", t0); st != (Status{}) {
				t.Fatalf("Check = %+v, want within limits", st)
			}
		}
		if n := l.Len(); n != 0 {
			t.Fatalf("Len = %d after Check only, want 0", n)
		}
		r := mustAcquire(t, l, "a", t0)
		if st := l.Check("a", t0); st != (Status{OverRate: true, AtConcurrency: true, Wait: time.Second, InFlight: 1}) {
			t.Fatalf("Check = %+v after Acquire", st)
		}
		r()
	})

	t.Run("unlimited", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{}, 0) // zero rate and in-flight: no limits
		for range 1000 {
			mustAcquire(t, l, "a", t0)
		}
		if st := l.Check("a", t0); st != (Status{InFlight: 1000}) {
			t.Fatalf("Check = %+v", st)
		}
	})

	t.Run("a token ages away: wait saturates", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1e-12, DrainBurst: 1}, 0)
		mustAcquire(t, l, "a", t0)()
		mustRefuse(t, l, "a", t0, Status{OverRate: true, Wait: math.MaxInt64})
	})

	t.Run("status reason", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			give Status
			want Reason
		}{
			{Status{}, ""},
			{Status{InFlight: 3}, ""},
			{Status{OverRate: true}, ReasonOverRate},
			{Status{AtConcurrency: true}, ReasonAtConcurrency},
			{Status{OverRate: true, AtConcurrency: true}, ReasonOverRate},
		} {
			if got := tt.give.Reason(); got != tt.want {
				t.Errorf("%+v.Reason() = %q, want %q", tt.give, got, tt.want)
			}
		}
	})

	t.Run("clock stepping back earns nothing", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1}, 0)
		mustAcquire(t, l, "a", t0.Add(10*time.Second))()
		// A caller whose reading of the clock lost the race to the lock.
		mustRefuse(t, l, "a", t0.Add(9*time.Second), Status{OverRate: true, Wait: time.Second})
		// Without the clamp the limiter would now credit 9s→10.5s.
		mustRefuse(t, l, "a", t0.Add(10500*time.Millisecond), Status{OverRate: true, Wait: 500 * time.Millisecond})
		mustAcquire(t, l, "a", t0.Add(11*time.Second))()
	})
}

func TestLimiterLimitsChange(t *testing.T) {
	t.Parallel()

	t.Run("rate change keeps the bucket's tokens and other tenants", func(t *testing.T) {
		t.Parallel()
		l, b := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 2}, 0)
		mustAcquire(t, l, "a", t0)()
		mustAcquire(t, l, "a", t0)()
		mustAcquire(t, l, "b", t0)() // b has 1 token left
		b.limits.set("a", Limits{DrainRate: 10, DrainBurst: 2})
		// a's bucket was not refilled by the change: still empty, but
		// refills ten times faster.
		mustRefuse(t, l, "a", t0, Status{OverRate: true, Wait: 100 * time.Millisecond})
		mustAcquire(t, l, "a", t0.Add(100*time.Millisecond))()
		mustAcquire(t, l, "b", t0)()
		mustRefuse(t, l, "b", t0, Status{OverRate: true, Wait: time.Second})
	})

	t.Run("burst change", func(t *testing.T) {
		t.Parallel()
		l, b := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1}, 0)
		mustAcquire(t, l, "a", t0)()
		b.limits.set("a", Limits{DrainRate: 1, DrainBurst: 3})
		mustRefuse(t, l, "a", t0, Status{OverRate: true, Wait: time.Second})
		at := t0.Add(3 * time.Second) // refilled to the new burst
		for range 3 {
			mustAcquire(t, l, "a", at)()
		}
		mustRefuse(t, l, "a", at, Status{OverRate: true, Wait: time.Second})
	})

	t.Run("in-flight limit lowered below what is held", func(t *testing.T) {
		t.Parallel()
		l, b := setupLimiter(t, Limits{MaxInFlight: 3}, 0)
		r1, r2, r3 := mustAcquire(t, l, "a", t0), mustAcquire(t, l, "a", t0), mustAcquire(t, l, "a", t0)
		b.limits.set("a", Limits{MaxInFlight: 1})
		mustRefuse(t, l, "a", t0, Status{AtConcurrency: true, InFlight: 3})
		r1()
		r2()
		mustRefuse(t, l, "a", t0, Status{AtConcurrency: true, InFlight: 1})
		r3()
		mustAcquire(t, l, "a", t0)()
		b.limits.set("a", Limits{MaxInFlight: 2})
		defer mustAcquire(t, l, "a", t0)()
		defer mustAcquire(t, l, "a", t0)()
	})

	t.Run("unlimited and back", func(t *testing.T) {
		t.Parallel()
		l, b := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1}, 0)
		mustAcquire(t, l, "a", t0)()
		b.limits.set("a", Limits{DrainRate: 0})
		mustAcquire(t, l, "a", t0)()
		b.limits.set("a", Limits{DrainRate: 1, DrainBurst: 1}) // limited again: a new, full bucket
		mustAcquire(t, l, "a", t0)()
		mustRefuse(t, l, "a", t0, Status{OverRate: true, Wait: time.Second})
	})
}

func TestLimiterSweep(t *testing.T) {
	t.Parallel()
	const idle = time.Minute

	t.Run("evicts exactly at the idle TTL", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 100, DrainBurst: 1}, idle)
		mustAcquire(t, l, "a", t0)()
		if ev, rem := l.Sweep(t0.Add(idle - time.Nanosecond)); ev != 0 || rem != 1 {
			t.Fatalf("Sweep before TTL = (%d, %d), want (0, 1)", ev, rem)
		}
		if ev, rem := l.Sweep(t0.Add(idle)); ev != 1 || rem != 0 {
			t.Fatalf("Sweep at TTL = (%d, %d), want (1, 0)", ev, rem)
		}
	})

	t.Run("check keeps a tenant alive", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 100, DrainBurst: 1}, idle)
		mustAcquire(t, l, "a", t0)()
		l.Check("a", t0.Add(30*time.Second))
		if ev, _ := l.Sweep(t0.Add(idle)); ev != 0 {
			t.Fatalf("evicted %d tenants checked 30s ago", ev)
		}
	})

	t.Run("never while in flight", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 100, DrainBurst: 1, MaxInFlight: 1}, idle)
		r := mustAcquire(t, l, "a", t0)
		if ev, rem := l.Sweep(t0.Add(24 * time.Hour)); ev != 0 || rem != 1 {
			t.Fatalf("Sweep with a delivery in flight = (%d, %d), want (0, 1)", ev, rem)
		}
		r()
		if ev, rem := l.Sweep(t0.Add(24 * time.Hour)); ev != 1 || rem != 0 {
			t.Fatalf("Sweep after release = (%d, %d), want (1, 0)", ev, rem)
		}
	})

	t.Run("never before the bucket refills", func(t *testing.T) {
		t.Parallel()
		// 1 token per 10 minutes, burst 2: full again 20 minutes after use.
		l, _ := setupLimiter(t, Limits{DrainRate: 1.0 / 600, DrainBurst: 2}, idle)
		mustAcquire(t, l, "a", t0)()
		mustAcquire(t, l, "a", t0)()
		if ev, _ := l.Sweep(t0.Add(20*time.Minute - time.Second)); ev != 0 {
			t.Fatal("evicted a tenant whose bucket was not full: it would come back with a free burst")
		}
		if ev, _ := l.Sweep(t0.Add(20 * time.Minute)); ev != 1 {
			t.Fatal("kept a tenant whose bucket was full and idle past the TTL")
		}
	})

	t.Run("an evicted tenant comes back as it left", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 2, MaxInFlight: 1}, idle)
		mustAcquire(t, l, "a", t0)()
		at := t0.Add(idle)
		if ev, _ := l.Sweep(at); ev != 1 {
			t.Fatal("not evicted")
		}
		r := mustAcquire(t, l, "a", at)
		mustRefuse(t, l, "a", at, Status{AtConcurrency: true, InFlight: 1})
		r()
		mustAcquire(t, l, "a", at)()
		mustRefuse(t, l, "a", at, Status{OverRate: true, Wait: time.Second})
	})

	t.Run("many tenants", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 10, DrainBurst: 10, MaxInFlight: 4}, idle)
		var held []func()
		for i := range 1000 {
			r := mustAcquire(t, l, fmt.Sprint("t", i), t0.Add(time.Duration(i)*time.Millisecond))
			if i%100 == 0 {
				held = append(held, r)
			} else {
				r()
			}
		}
		if ev, rem := l.Sweep(t0.Add(time.Hour)); ev != 990 || rem != 10 {
			t.Fatalf("Sweep = (%d, %d), want (990, 10)", ev, rem)
		}
		for _, r := range held {
			r()
		}
		if ev, rem := l.Sweep(t0.Add(time.Hour)); ev != 10 || rem != 0 || l.Len() != 0 {
			t.Fatalf("Sweep = (%d, %d), Len = %d, want (10, 0), 0", ev, rem, l.Len())
		}
	})
}

func TestLimiterAdmit(t *testing.T) {
	t.Parallel()
	p := Policy{StalenessBound: time.Minute}
	in := func(src Source) Input {
		return Input{Now: t0, Source: src, EnqueuedAt: t0.Add(-time.Second), ReceiveCount: 1}
	}

	t.Run("deliver holds a token and a slot", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1, MaxInFlight: 1}, 0)
		d, release := l.Admit(p, "a", in(SourceShard))
		if d.Action != Deliver {
			t.Fatalf("Admit = %+v, want deliver", d)
		}
		if st := l.Check("a", t0); !st.OverRate || !st.AtConcurrency {
			t.Fatalf("Check after deliver = %+v, want token and slot taken", st)
		}
		release()
		release()
		if st := l.Check("a", t0); st.InFlight != 0 {
			t.Fatalf("InFlight = %d after release", st.InFlight)
		}
	})

	t.Run("spill or defer on the refusing state", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 0.05, DrainBurst: 1}, 0) // a token every 20s
		_, release := l.Admit(p, "a", in(SourceShard))
		release()
		d, release := l.Admit(p, "a", in(SourceShard))
		release()
		if want := (Decision{Action: Spill, Reason: ReasonOverRate}); d != want {
			t.Fatalf("from shard: Admit = %+v, want %+v", d, want)
		}
		d, release = l.Admit(p, "a", in(SourceSpillover))
		release()
		if want := (Decision{Action: Defer, Reason: ReasonOverRate, Delay: 20 * time.Second}); d != want {
			t.Fatalf("from spillover: Admit = %+v, want %+v (the token wait)", d, want)
		}
	})

	t.Run("at concurrency", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{MaxInFlight: 1}, 0)
		_, held := l.Admit(p, "a", in(SourceShard))
		defer held()
		d, release := l.Admit(p, "a", in(SourceBacklog))
		release()
		if want := (Decision{Action: Defer, Reason: ReasonAtConcurrency, Delay: 5 * time.Second}); d != want {
			t.Fatalf("Admit = %+v, want %+v", d, want)
		}
	})

	t.Run("non-deliveries consume nothing", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1, MaxInFlight: 1}, 0)
		for _, give := range []Input{
			{Now: t0, Source: SourceShard, Malformed: true},
			{Now: t0, Source: SourceShard, ExpiresAt: t0},
			{Now: t0, Source: SourceShard, Attempts: 5},
			{Now: t0, Source: SourceShard, EnqueuedAt: t0.Add(-time.Hour)},
		} {
			d, release := l.Admit(p, "a", give)
			release()
			if d.Action == Deliver {
				t.Fatalf("Admit(%+v) = deliver", give)
			}
		}
		if l.Len() != 0 {
			t.Fatal("non-deliveries created tenant state")
		}
	})

	t.Run("caller's tenant fields are ignored", func(t *testing.T) {
		t.Parallel()
		l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1}, 0)
		give := in(SourceShard)
		give.TenantOverRate, give.TenantAtConcurrency = true, true
		d, release := l.Admit(p, "a", give)
		defer release()
		if d.Action != Deliver {
			t.Fatalf("Admit = %+v, want deliver: the limiter has a token", d)
		}
	})
}

// TestLimiterConcurrent hammers a few tenants from many goroutines, with
// limits changing and sweeps running, and checks under -race that no tenant
// ever exceeds its in-flight limit or is given more tokens than its bucket
// could hold.
func TestLimiterConcurrent(t *testing.T) {
	t.Parallel()
	const (
		tenants    = 8
		goroutines = 32
		rounds     = 500
		maxInFl    = 3
		burst      = 50
	)
	l, b := setupLimiter(t, Limits{DrainRate: 1000, DrainBurst: burst, MaxInFlight: maxInFl}, time.Nanosecond)
	p := Policy{}
	var (
		clock    atomic.Int64 // nanoseconds since t0; advanced by the goroutines
		inFlight [tenants]atomic.Int64
		granted  [tenants]atomic.Int64
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	now := func() time.Time { return t0.Add(time.Duration(clock.Load())) }

	wg.Add(1)
	go func() { // limits churn and sweeps; neither may break the invariants
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b.limits.set(fmt.Sprint("t", i%tenants), Limits{DrainRate: float64(500 + i%2*500), DrainBurst: burst, MaxInFlight: maxInFl})
			l.Sweep(now())
		}
	}()

	var workers sync.WaitGroup
	for g := range goroutines {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for r := range rounds {
				i := (g + r) % tenants
				tenant := fmt.Sprint("t", i)
				at := now()
				var release func()
				if r%2 == 0 {
					var ok bool
					release, ok, _ = l.Acquire(tenant, at)
					if !ok {
						continue
					}
				} else {
					var d Decision
					d, release = l.Admit(p, tenant, Input{Now: at, Source: SourceShard, ReceiveCount: 1})
					if d.Action != Deliver {
						release()
						continue
					}
				}
				granted[i].Add(1)
				if n := inFlight[i].Add(1); n > maxInFl {
					t.Errorf("tenant %d: %d in flight, limit %d", i, n, maxInFl)
				}
				clock.Add(int64(50 * time.Microsecond))
				inFlight[i].Add(-1)
				release()
				release()
			}
		}()
	}
	workers.Wait()
	close(stop)
	wg.Wait()

	elapsed := time.Duration(clock.Load())
	for i := range tenants {
		// Sweeps evict only full buckets, which come back full: eviction
		// grants nothing, so a tenant gets at most a burst plus the
		// fastest rate over the run.
		limit := int64(burst) + int64(elapsed.Seconds()*1000) + 1
		if g := granted[i].Load(); g > limit {
			t.Errorf("tenant %d granted %d, more than burst + rate × %v = %d", i, g, elapsed, limit)
		}
		if st := l.Check(fmt.Sprint("t", i), now()); st.InFlight != 0 {
			t.Errorf("tenant %d: InFlight = %d after every release", i, st.InFlight)
		}
	}
}
