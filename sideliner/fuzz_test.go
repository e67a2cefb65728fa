package sideliner

import (
	"math"
	"testing"
	"time"
)

// validReasons lists the reasons each action may carry.
var validReasons = map[Action][]Reason{
	Deliver:    {ReasonWithinLimits},
	Spill:      {ReasonReadAheadFull},
	Backlog:    {ReasonStale},
	Drop:       {ReasonTTLExpired, ReasonExpiresBeforeRetry},
	DeadLetter: {ReasonMalformed, ReasonAttemptsExhausted, ReasonPermanentFailure},
	Defer:      {ReasonReadAheadFull},
	Requeue:    {ReasonReadAheadFull},
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
			ReadAheadFull: overRate || atConc, Jitter: jitter,
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
			if malformed || isExpired || attempts >= n.MaxAttempts || (in.ReadAheadFull && !p.NoSideline) {
				t.Fatalf("delivered %+v: malformed %v, expired %v, attempts %d/%d, read-ahead full %v",
					in, malformed, isExpired, attempts, n.MaxAttempts, in.ReadAheadFull)
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
			// (jitter).
			longest := n.DeferCap
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
