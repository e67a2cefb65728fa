package sideliner

import (
	"math"
	"testing"
	"time"
)

// validReasons lists the reasons each action may carry.
var validReasons = map[Action][]Reason{
	Deliver:    {ReasonWithinLimits},
	Spill:      {ReasonOverRate, ReasonAtConcurrency},
	Backlog:    {ReasonStale},
	Drop:       {ReasonTTLExpired, ReasonExpiresBeforeRetry},
	DeadLetter: {ReasonMalformed, ReasonAttemptsExhausted, ReasonPermanentFailure},
	Defer:      {ReasonOverRate, ReasonAtConcurrency},
	Requeue:    {ReasonOverRate, ReasonAtConcurrency},
	Retry:      {ReasonRetryableFailure},
}

func checkDecision(t *testing.T, d Decision) {
	t.Helper()
	reasons, ok := validReasons[d.Action]
	if !ok {
		t.Fatalf("invalid action in %+v", d)
	}
	found := false
	for _, r := range reasons {
		found = found || r == d.Reason
	}
	if !found {
		t.Fatalf("reason %q not valid for %v", d.Reason, d.Action)
	}
	if d.Delay < 0 || d.Delay > MaxDelay {
		t.Fatalf("Delay %v outside [0, %v]", d.Delay, MaxDelay)
	}
	switch d.Action {
	case Defer, Requeue, Retry:
		if d.Delay == 0 {
			t.Fatalf("%v with zero delay", d.Action)
		}
	default:
		if d.Delay != 0 {
			t.Fatalf("%v with delay %v", d.Action, d.Delay)
		}
	}
}

func FuzzDecide(f *testing.F) {
	f.Add(int64(0), 1, int64(time.Second), true, int64(0), false, 0, 1,
		int64(5*time.Minute), false, false, false, int64(0), 0.0, 0, 0, int64(0))
	f.Add(int64(1e18), 2, int64(time.Hour), true, int64(-time.Second), true, 4, 5,
		int64(time.Minute), true, true, false, int64(time.Hour), 0.999, 5, 5, int64(time.Second))
	f.Add(int64(-1), 3, int64(math.MaxInt64), true, int64(math.MinInt64), true, math.MaxInt, math.MinInt,
		int64(-1), true, false, true, int64(math.MinInt64), math.NaN(), -1, -1, int64(-1))
	f.Add(int64(7), 0, int64(0), false, int64(0), false, -1, 1_000_000,
		int64(1), false, true, false, int64(math.MaxInt64), math.Inf(1), 1, 1_000_000, int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, nowNs int64, source int, age int64, hasEnq bool, ttl int64, hasExp bool,
		attempts, receives int, bound int64, overRate, atConc, malformed bool, wait int64, jitter float64,
		maxAttempts, maxReceives int, deferDelay int64,
	) {
		now := time.Unix(0, nowNs)
		in := Input{
			Now: now, Source: Source(source), Malformed: malformed,
			Attempts: attempts, ReceiveCount: receives,
			TenantOverRate: overRate, TenantAtConcurrency: atConc,
			TenantWait: time.Duration(wait), Jitter: jitter,
		}
		if hasEnq {
			in.EnqueuedAt = now.Add(-time.Duration(age))
		}
		if hasExp {
			in.ExpiresAt = now.Add(time.Duration(ttl))
		}
		p := Policy{
			StalenessBound: time.Duration(bound), MaxAttempts: maxAttempts,
			MaxReceives: maxReceives, DeferDelay: time.Duration(deferDelay),
		}
		d := p.Decide(in)
		checkDecision(t, d)
		if again := p.Decide(in); again != d {
			t.Fatalf("not deterministic: %+v then %+v", d, again)
		}
		n := p.normalized()
		isExpired := !in.ExpiresAt.IsZero() && !now.Before(in.ExpiresAt)
		switch d.Action {
		case Retry:
			t.Fatal("Decide chose retry")
		case Deliver:
			if malformed || isExpired || attempts >= n.MaxAttempts || overRate || atConc {
				t.Fatalf("delivered %+v: malformed %v, expired %v, attempts %d/%d, over rate %v, at concurrency %v",
					in, malformed, isExpired, attempts, n.MaxAttempts, overRate, atConc)
			}
		case Backlog, Spill:
			if in.Source != SourceShard {
				t.Fatalf("%v chosen for a message from %v", d.Action, in.Source)
			}
		case Defer, Requeue:
			if in.Source == SourceShard {
				t.Fatalf("%v chosen for a message from a shard", d.Action)
			}
			if (d.Action == Requeue) != (receives >= n.MaxReceives) {
				t.Fatalf("%v at receive %d of %d", d.Action, receives, n.MaxReceives)
			}
			// However many receives, a deferral waits at most twice the cap
			// (jitter), or twice the tenant's own wait when over rate.
			longest := n.DeferCap
			if overRate {
				longest = max(longest, min(in.TenantWait, MaxDelay))
			}
			if d.Delay > min(2*longest, MaxDelay) {
				t.Fatalf("%v delayed %s, beyond twice %s", d.Action, d.Delay, longest)
			}
		}
		if malformed && (d.Action != DeadLetter || d.Reason != ReasonMalformed) {
			t.Fatalf("malformed message got %+v", d)
		}
		if !malformed && isExpired && d.Action != Drop {
			t.Fatalf("expired message got %+v", d)
		}
	})
}

func FuzzAfterFailure(f *testing.F) {
	f.Add(int64(0), 0, int64(0), 1, false, int64(0), 0.0, 0, int64(0), int64(0))
	f.Add(int64(1e18), 1, int64(time.Hour), 4, true, int64(time.Minute), 0.999, 5, int64(time.Second), int64(time.Minute))
	f.Add(int64(-1), 7, int64(math.MaxInt64), math.MaxInt, true, int64(math.MinInt64), math.NaN(), -1, int64(-1), int64(math.MaxInt64))
	f.Add(int64(3), -1, int64(math.MinInt64), math.MinInt, false, int64(1), math.Inf(-1), 1_000_000, int64(math.MaxInt64), int64(1))
	f.Fuzz(func(t *testing.T, nowNs int64, class int, retryAfter int64, attempts int, hasExp bool, ttl int64,
		jitter float64, maxAttempts int, base, limit int64,
	) {
		now := time.Unix(0, nowNs)
		in := FailureInput{
			Now: now, Class: FailureClass(class), RetryAfter: time.Duration(retryAfter),
			Attempts: attempts, Jitter: jitter,
		}
		if hasExp {
			in.ExpiresAt = now.Add(time.Duration(ttl))
		}
		p := Policy{MaxAttempts: maxAttempts, RetryBase: time.Duration(base), RetryCap: time.Duration(limit)}
		d := p.AfterFailure(in)
		checkDecision(t, d)
		n := p.normalized()
		switch d.Action {
		case Retry:
			if in.Class == Permanent || attempts >= n.MaxAttempts {
				t.Fatalf("retried class %v at attempt %d of %d", in.Class, attempts, n.MaxAttempts)
			}
			if d.Delay < min(in.RetryAfter, MaxDelay) || d.Delay < n.RetryBase {
				t.Fatalf("Delay %v below hint %v or base %v", d.Delay, in.RetryAfter, n.RetryBase)
			}
			if d.Delay > max(n.RetryCap, min(in.RetryAfter, MaxDelay)) {
				t.Fatalf("Delay %v above cap %v and hint %v", d.Delay, n.RetryCap, in.RetryAfter)
			}
			if !in.ExpiresAt.IsZero() && !now.Add(d.Delay).Before(in.ExpiresAt) {
				t.Fatalf("retry scheduled at or after the TTL")
			}
		case DeadLetter:
			if d.Reason == ReasonPermanentFailure != (in.Class == Permanent) {
				t.Fatalf("%+v for class %v", d, in.Class)
			}
		case Drop:
			if in.ExpiresAt.IsZero() {
				t.Fatal("dropped a job without a TTL")
			}
		default:
			t.Fatalf("AfterFailure chose %v", d.Action)
		}
		b := p.Backoff(attempts, jitter)
		if b < n.RetryBase || b > n.RetryCap || b > MaxDelay {
			t.Fatalf("Backoff = %v outside [%v, %v]", b, n.RetryBase, n.RetryCap)
		}
	})
}

// FuzzLimiter drives a Limiter with a byte tape of operations against a
// fake clock and checks it against a model of the slots held: Check and
// Acquire agree on the same state, in-flight counts match the model, and
// Sweep never loses a held slot.
func FuzzLimiter(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 0, 2, 10, 3, 4, 4, 0, 5, 1})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 1, 0, 2, 255, 4, 0, 3, 0, 0, 1})
	f.Fuzz(func(t *testing.T, tape []byte) {
		const tenants = 3
		limits := [tenants]Limits{
			{DrainRate: 2, DrainBurst: 2, MaxInFlight: 2},
			{DrainRate: 0.5, DrainBurst: 1, MaxInFlight: 1},
			{},
		}
		lim, err := NewLimiter(LimiterConfig{
			Limits:  func(tenant string) Limits { return limits[tenant[0]-'a'] },
			IdleTTL: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		name := func(i byte) string { return string(rune('a' + i%tenants)) }
		now, latest := t0, t0
		var held [tenants][]func()
		next := func() byte {
			if len(tape) == 0 {
				return 0
			}
			b := tape[0]
			tape = tape[1:]
			return b
		}
		for len(tape) > 0 {
			op, arg := next()%6, next()
			i := arg % tenants
			switch op {
			case 0: // check, then acquire: they must agree
				st := lim.Check(name(i), now)
				release, ok, ast := lim.Acquire(name(i), now)
				if ok != (!st.OverRate && !st.AtConcurrency) {
					t.Fatalf("Check said %+v, Acquire ok = %v (%+v)", st, ok, ast)
				}
				if !ok && (ast.OverRate != st.OverRate || ast.AtConcurrency != st.AtConcurrency) {
					t.Fatalf("Check said %+v, Acquire refused with %+v", st, ast)
				}
				if ok {
					held[i] = append(held[i], release)
				}
			case 1: // release the oldest slot, twice
				if len(held[i]) > 0 {
					held[i][0]()
					held[i][0]()
					held[i] = held[i][1:]
				}
			case 2: // time passes
				now = now.Add(time.Duration(arg) * 10 * time.Millisecond)
				if now.After(latest) {
					latest = now
				}
			case 3: // time steps back a little
				now = now.Add(-time.Duration(arg) * time.Millisecond)
			case 4: // limits change
				limits[i] = Limits{DrainRate: float64(arg%5) / 2, DrainBurst: int(arg % 4), MaxInFlight: int(arg%3) - 1}
			case 5:
				lim.Sweep(now)
			}
			for j := range byte(tenants) {
				st := lim.Check(name(j), now)
				if st.InFlight != len(held[j]) {
					t.Fatalf("tenant %s: InFlight = %d, model holds %d", name(j), st.InFlight, len(held[j]))
				}
				if m := limits[j].MaxInFlight; m > 0 && st.AtConcurrency != (len(held[j]) >= m) {
					t.Fatalf("tenant %s: AtConcurrency = %v with %d held of %d", name(j), st.AtConcurrency, len(held[j]), m)
				}
				if st.OverRate != (st.Wait > 0) {
					t.Fatalf("tenant %s: %+v", name(j), st)
				}
			}
		}
		for i := range held {
			for _, r := range held[i] {
				r()
			}
		}
		if _, rem := lim.Sweep(latest.Add(time.Hour)); rem != 0 {
			t.Fatalf("%d tenants left after releasing everything and idling an hour", rem)
		}
	})
}
