package sideliner

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/topology"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// almostOne is the largest float64 below 1, the top of a [0, 1) jitter.
var almostOne = math.Nextafter(1, 0)

func TestDecide(t *testing.T) {
	t.Parallel()
	const bound = 5 * time.Minute
	lane := Policy{StalenessBound: bound} // defaults: 5 attempts, 5 receives, 5s defer
	// fresh is a shard message that every rule lets through.
	fresh := Input{Now: t0, Source: SourceShard, EnqueuedAt: t0.Add(-time.Second), ReceiveCount: 1}
	with := func(f func(*Input)) Input { in := fresh; f(&in); return in }
	deliver := Decision{Action: Deliver, Reason: ReasonWithinLimits}
	deferred := func(a Action, r Reason) Decision { return Decision{Action: a, Reason: r, Delay: 5 * time.Second} }

	tests := []struct {
		name string
		p    Policy
		in   Input
		want Decision
	}{
		// Rule 7: deliver.
		{"fresh from shard", lane, fresh, deliver},
		{"fresh from spillover", lane, with(func(in *Input) { in.Source = SourceSpillover }), deliver},
		{"from backlog", lane, with(func(in *Input) { in.Source = SourceBacklog; in.EnqueuedAt = t0.Add(-time.Hour) }), deliver},

		// Rule 1: malformed beats everything.
		{"malformed", lane, with(func(in *Input) { in.Malformed = true }), Decision{Action: DeadLetter, Reason: ReasonMalformed}},
		{"malformed, expired, exhausted, stale, over rate", lane, with(func(in *Input) {
			in.Malformed, in.ExpiresAt, in.Attempts, in.EnqueuedAt, in.ReadAheadFull = true, t0, 9, t0.Add(-time.Hour), true
		}), Decision{Action: DeadLetter, Reason: ReasonMalformed}},
		{"malformed from backlog", lane, with(func(in *Input) { in.Malformed, in.Source = true, SourceBacklog }), Decision{Action: DeadLetter, Reason: ReasonMalformed}},

		// Rule 2: TTL.
		{"exactly at TTL", lane, with(func(in *Input) { in.ExpiresAt = t0 }), Decision{Action: Drop, Reason: ReasonTTLExpired}},
		{"one ns before TTL", lane, with(func(in *Input) { in.ExpiresAt = t0.Add(time.Nanosecond) }), deliver},
		{"past TTL", lane, with(func(in *Input) { in.ExpiresAt = t0.Add(-time.Hour) }), Decision{Action: Drop, Reason: ReasonTTLExpired}},
		{"no TTL", lane, with(func(in *Input) { in.ExpiresAt = time.Time{} }), deliver},
		{"expired beats exhausted", lane, with(func(in *Input) { in.ExpiresAt, in.Attempts = t0, 5 }), Decision{Action: Drop, Reason: ReasonTTLExpired}},
		{"expired from spillover over rate", lane, with(func(in *Input) {
			in.Source, in.ExpiresAt, in.ReadAheadFull = SourceSpillover, t0, true
		}), Decision{Action: Drop, Reason: ReasonTTLExpired}},

		// Rule 3: attempts.
		{"attempts = max-1: last delivery", lane, with(func(in *Input) { in.Attempts = 4 }), deliver},
		{"attempts = max", lane, with(func(in *Input) { in.Attempts = 5 }), Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}},
		{"attempts > max", lane, with(func(in *Input) { in.Attempts = 50 }), Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}},
		{"custom max attempts = 1, first delivery", Policy{MaxAttempts: 1}, fresh, deliver},
		{"custom max attempts = 1, after one", Policy{MaxAttempts: 1}, with(func(in *Input) { in.Attempts = 1 }), Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}},
		{"negative max attempts counts as default", Policy{MaxAttempts: -3}, with(func(in *Input) { in.Attempts = 4 }), deliver},
		{"exhausted beats stale", lane, with(func(in *Input) { in.Attempts, in.EnqueuedAt = 5, t0.Add(-time.Hour) }), Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}},

		// Rule 4: staleness, shard only.
		{"age exactly at bound is fresh", lane, with(func(in *Input) { in.EnqueuedAt = t0.Add(-bound) }), deliver},
		{"age one ns past bound", lane, with(func(in *Input) { in.EnqueuedAt = t0.Add(-bound - time.Nanosecond) }), Decision{Action: Backlog, Reason: ReasonStale}},
		{"stale beats over rate", lane, with(func(in *Input) { in.EnqueuedAt, in.ReadAheadFull = t0.Add(-time.Hour), true }), Decision{Action: Backlog, Reason: ReasonStale}},
		{"bound 0 never backlogs", Policy{}, with(func(in *Input) { in.EnqueuedAt = t0.Add(-24 * time.Hour) }), deliver},
		{"unknown age is not stale", lane, with(func(in *Input) { in.EnqueuedAt = time.Time{} }), deliver},
		{"enqueued in the future (skew) is not stale", lane, with(func(in *Input) { in.EnqueuedAt = t0.Add(time.Hour) }), deliver},
		{"stale in spillover is delivered", lane, with(func(in *Input) { in.Source, in.EnqueuedAt = SourceSpillover, t0.Add(-time.Hour) }), deliver},
		{"stale in spillover over rate is deferred", lane, with(func(in *Input) {
			in.Source, in.EnqueuedAt, in.ReadAheadFull = SourceSpillover, t0.Add(-time.Hour), true
		}), deferred(Defer, ReasonReadAheadFull)},
		{"stale in backlog is never re-backlogged", lane, with(func(in *Input) { in.Source, in.EnqueuedAt = SourceBacklog, t0.Add(-time.Hour) }), deliver},

		// Rules 5 and 6: tenant limits.
		{"over rate from shard", lane, with(func(in *Input) { in.ReadAheadFull = true }), Decision{Action: Spill, Reason: ReasonReadAheadFull}},
		{"at concurrency from shard", lane, with(func(in *Input) { in.ReadAheadFull = true }), Decision{Action: Spill, Reason: ReasonReadAheadFull}},
		{"both from shard: over rate first", lane, with(func(in *Input) { in.ReadAheadFull = true }), Decision{Action: Spill, Reason: ReasonReadAheadFull}},
		{"over rate from spillover", lane, with(func(in *Input) { in.Source, in.ReadAheadFull = SourceSpillover, true }), deferred(Defer, ReasonReadAheadFull)},
		{"at concurrency from spillover", lane, with(func(in *Input) { in.Source, in.ReadAheadFull = SourceSpillover, true }), deferred(Defer, ReasonReadAheadFull)},
		{"over rate from backlog", lane, with(func(in *Input) { in.Source, in.ReadAheadFull = SourceBacklog, true }), deferred(Defer, ReasonReadAheadFull)},
		{"at concurrency from backlog", lane, with(func(in *Input) { in.Source, in.ReadAheadFull = SourceBacklog, true }), deferred(Defer, ReasonReadAheadFull)},
		{
			"receive max-1 is deferred", lane, with(func(in *Input) { in.Source, in.ReadAheadFull, in.ReceiveCount = SourceSpillover, true, 4 }),
			Decision{Action: Defer, Reason: ReasonReadAheadFull, Delay: 40 * time.Second},
		},
		{
			"receive = max is requeued", lane, with(func(in *Input) { in.Source, in.ReadAheadFull, in.ReceiveCount = SourceSpillover, true, 5 }),
			Decision{Action: Requeue, Reason: ReasonReadAheadFull, Delay: DeferCapDefault},
		}, // 5s·2^4 = 80s, capped
		{
			"receive > max is requeued", lane, with(func(in *Input) { in.Source, in.ReadAheadFull, in.ReceiveCount = SourceBacklog, true, 9 }),
			Decision{Action: Requeue, Reason: ReasonReadAheadFull, Delay: DeferCapDefault},
		}, // 5s·2^8 = 1280s, capped
		{
			"negative max receives counts as default",
			Policy{MaxReceives: -1},
			with(func(in *Input) { in.Source, in.ReadAheadFull, in.ReceiveCount = SourceBacklog, true, 4 }),
			Decision{Action: Defer, Reason: ReasonReadAheadFull, Delay: 40 * time.Second},
		},
		{
			"custom max receives",
			Policy{MaxReceives: 2},
			with(func(in *Input) { in.Source, in.ReadAheadFull, in.ReceiveCount = SourceBacklog, true, 2 }),
			Decision{Action: Requeue, Reason: ReasonReadAheadFull, Delay: 10 * time.Second},
		},

		// Unknown sources behave as backlog: never moved to another queue.
		{"zero source, stale, over rate", lane, with(func(in *Input) { in.Source, in.EnqueuedAt, in.ReadAheadFull = 0, t0.Add(-time.Hour), true }), deferred(Defer, ReasonReadAheadFull)},
		{"unknown source, stale", lane, with(func(in *Input) { in.Source, in.EnqueuedAt = 42, t0.Add(-time.Hour) }), deliver},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.p.Decide(tt.in); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDeferDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		p        Policy
		receives int
		overRate bool
		wait     time.Duration
		jitter   float64
		want     time.Duration
	}{
		{"first receive", Policy{}, 1, true, 0, 0, 5 * time.Second},
		{"receive count 0 counts as 1", Policy{}, 0, true, 0, 0, 5 * time.Second},
		{"second receive doubles", Policy{MaxReceives: 100}, 2, true, 0, 0, 10 * time.Second},
		{"third receive", Policy{MaxReceives: 100}, 3, true, 0, 0, 20 * time.Second},
		{"many receives cap at DeferCap", Policy{MaxReceives: 1000}, 500, true, 0, 0, DeferCapDefault},
		{"receive 5 of 10 capped", Policy{MaxReceives: 10}, 5, true, 0, 0, DeferCapDefault},
		{"capped and jittered at most twice the cap", Policy{MaxReceives: 1000}, 500, true, 0, 1, 2 * DeferCapDefault},
		{"custom cap", Policy{MaxReceives: 1000, DeferCap: 15 * time.Minute}, 500, true, 0, 0, MaxDelay},
		{"custom cap jittered stays at MaxDelay", Policy{MaxReceives: 1000, DeferCap: 15 * time.Minute}, 500, true, 0, almostOne, MaxDelay},
		{"cap below the defer delay rises to it", Policy{MaxReceives: 100, DeferDelay: 2 * time.Minute, DeferCap: time.Second}, 3, true, 0, 0, 2 * time.Minute},
		{"default cap rises to a long defer delay", Policy{MaxReceives: 100, DeferDelay: 2 * time.Minute}, 3, true, 0, 0, 2 * time.Minute},
		{"jitter 0.5", Policy{}, 1, true, 0, 0.5, 7500 * time.Millisecond},
		{"jitter just under 1", Policy{}, 1, true, 0, almostOne, 10*time.Second - time.Nanosecond},
		{"jitter above 1 clamps to 1", Policy{}, 1, true, 0, 7, 10 * time.Second},
		{"negative jitter clamps to 0", Policy{}, 1, true, 0, -1, 5 * time.Second},
		{"NaN jitter counts as 0", Policy{}, 1, true, 0, math.NaN(), 5 * time.Second},
		{"custom defer delay", Policy{DeferDelay: time.Minute}, 1, true, 0, 0, time.Minute},
		{"defer delay above MaxDelay clamps", Policy{DeferDelay: time.Hour}, 1, true, 0, 0.5, MaxDelay},
		{"negative defer delay counts as default", Policy{DeferDelay: -time.Second}, 1, true, 0, 0, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := Input{
				Now: t0, Source: SourceSpillover, ReceiveCount: tt.receives,
				ReadAheadFull: true, Jitter: tt.jitter,
			}
			got := tt.p.Decide(in)
			if got.Action != Defer && got.Action != Requeue {
				t.Fatalf("Action = %v, want defer or requeue", got.Action)
			}
			if got.Delay != tt.want {
				t.Fatalf("Delay = %v, want %v", got.Delay, tt.want)
			}
		})
	}
}

func TestAfterFailure(t *testing.T) {
	t.Parallel()
	p := Policy{} // 5 attempts, backoff base 2s, cap 900s
	retry := func(d time.Duration) Decision {
		return Decision{Action: Retry, Reason: ReasonRetryableFailure, Delay: d}
	}
	tests := []struct {
		name string
		p    Policy
		in   FailureInput
		want Decision
	}{
		{"first failure", p, FailureInput{Now: t0, Attempts: 1}, retry(2 * time.Second)},
		{"attempts = max-1 retries", p, FailureInput{Now: t0, Attempts: 4}, retry(2 * time.Second)},
		{"attempts = max-1 retries, jitter ~1", p, FailureInput{Now: t0, Attempts: 4, Jitter: almostOne}, retry(16*time.Second - time.Nanosecond)},
		{"attempts = max", p, FailureInput{Now: t0, Attempts: 5}, Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}},
		{"attempts > max", p, FailureInput{Now: t0, Attempts: 6}, Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}},
		{"permanent", p, FailureInput{Now: t0, Class: Permanent, Attempts: 1}, Decision{Action: DeadLetter, Reason: ReasonPermanentFailure}},
		{
			"permanent beats exhausted and expired", p,
			FailureInput{Now: t0, Class: Permanent, Attempts: 9, ExpiresAt: t0},
			Decision{Action: DeadLetter, Reason: ReasonPermanentFailure},
		},
		{"exhausted beats expired", p, FailureInput{Now: t0, Attempts: 5, ExpiresAt: t0}, Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}},
		{"unknown class retries", p, FailureInput{Now: t0, Class: FailureClass(7), Attempts: 1}, retry(2 * time.Second)},
		{"retry-after above backoff wins", p, FailureInput{Now: t0, Attempts: 1, RetryAfter: time.Minute}, retry(time.Minute)},
		{"retry-after below backoff loses", p, FailureInput{Now: t0, Attempts: 1, RetryAfter: time.Second}, retry(2 * time.Second)},
		{"retry-after above MaxDelay capped", p, FailureInput{Now: t0, Attempts: 1, RetryAfter: time.Hour}, retry(MaxDelay)},
		{"retry-after above RetryCap honoured", Policy{RetryCap: 10 * time.Second}, FailureInput{Now: t0, Attempts: 1, RetryAfter: time.Minute}, retry(time.Minute)},
		{"negative retry-after ignored", p, FailureInput{Now: t0, Attempts: 1, RetryAfter: -time.Hour}, retry(2 * time.Second)},
		{
			"retry lands exactly at TTL", p,
			FailureInput{Now: t0, Attempts: 1, ExpiresAt: t0.Add(2 * time.Second)},
			Decision{Action: Drop, Reason: ReasonExpiresBeforeRetry},
		},
		{"retry lands one ns before TTL", p, FailureInput{Now: t0, Attempts: 1, ExpiresAt: t0.Add(2*time.Second + time.Nanosecond)}, retry(2 * time.Second)},
		{"already expired", p, FailureInput{Now: t0, Attempts: 1, ExpiresAt: t0.Add(-time.Hour)}, Decision{Action: Drop, Reason: ReasonExpiresBeforeRetry}},
		{
			"retry-after pushes past TTL", p,
			FailureInput{Now: t0, Attempts: 1, RetryAfter: time.Minute, ExpiresAt: t0.Add(30 * time.Second)},
			Decision{Action: Drop, Reason: ReasonExpiresBeforeRetry},
		},
		{"attempts 0 counts as first", p, FailureInput{Now: t0, Attempts: 0, Jitter: almostOne}, retry(2 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.p.AfterFailure(tt.in); got != tt.want {
				t.Fatalf("AfterFailure = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		p       Policy
		attempt int
		jitter  float64
		want    time.Duration
	}{
		{"attempt 1, jitter 0", Policy{}, 1, 0, 2 * time.Second},
		{"attempt 1, jitter ~1: window is [base, base]", Policy{}, 1, almostOne, 2 * time.Second},
		{"attempt 2, jitter 1", Policy{}, 2, 1, 4 * time.Second},
		{"attempt 3, jitter 0.5", Policy{}, 3, 0.5, 5 * time.Second},
		{"attempt 9, jitter 1: 512s", Policy{}, 9, 1, 512 * time.Second},
		{"attempt 10, jitter 1: 1024s capped", Policy{}, 10, 1, MaxDelay},
		{"attempt 10, jitter 0: base", Policy{}, 10, 0, 2 * time.Second},
		{"huge attempt", Policy{}, math.MaxInt, 1, MaxDelay},
		{"attempt 0 counts as 1", Policy{}, 0, 1, 2 * time.Second},
		{"negative attempt counts as 1", Policy{}, -7, 1, 2 * time.Second},
		{"custom cap", Policy{RetryBase: time.Second, RetryCap: time.Minute}, 20, 1, time.Minute},
		{"cap above MaxDelay clamps", Policy{RetryCap: time.Hour}, 30, 1, MaxDelay},
		{"base above cap clamps to cap", Policy{RetryBase: time.Hour, RetryCap: time.Minute}, 1, 0, time.Minute},
		{"negative cap counts as default", Policy{RetryCap: -time.Second}, 30, 1, MaxDelay},
		{"negative base counts as default", Policy{RetryBase: -time.Second}, 1, 0, 2 * time.Second},
		{"jitter NaN", Policy{}, 5, math.NaN(), 2 * time.Second},
		{"jitter +Inf clamps to 1", Policy{}, 5, math.Inf(1), 32 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.p.Backoff(tt.attempt, tt.jitter); got != tt.want {
				t.Fatalf("Backoff(%d, %v) = %v, want %v", tt.attempt, tt.jitter, got, tt.want)
			}
		})
	}
}

// TestRetryDelayBounds sweeps attempts 1..20 with jitter extremes and
// retry-after hints: the delay never exceeds the cap, never falls below the
// hint or the base, and its window only grows.
func TestRetryDelayBounds(t *testing.T) {
	t.Parallel()
	for _, p := range []Policy{
		{MaxAttempts: 100},
		{MaxAttempts: 100, RetryBase: time.Second, RetryCap: 5 * time.Minute},
		{MaxAttempts: 100, RetryBase: 100 * time.Millisecond, RetryCap: 30 * time.Second},
	} {
		n := p.normalized()
		for _, hint := range []time.Duration{0, time.Second, 10 * time.Minute, time.Hour} {
			for _, jitter := range []float64{0, 0.25, almostOne} {
				prev := time.Duration(0)
				for attempt := 1; attempt <= 20; attempt++ {
					d := p.AfterFailure(FailureInput{Now: t0, Attempts: attempt, RetryAfter: hint, Jitter: jitter})
					if d.Action != Retry {
						t.Fatalf("%+v attempt %d: Action = %v, want retry", p, attempt, d.Action)
					}
					floor := max(n.RetryBase, min(hint, MaxDelay))
					limit := max(n.RetryCap, min(hint, MaxDelay))
					if d.Delay < floor || d.Delay > limit || d.Delay > MaxDelay {
						t.Fatalf("%+v attempt %d hint %v jitter %v: Delay = %v, want in [%v, %v]",
							p, attempt, hint, jitter, d.Delay, floor, limit)
					}
					if d.Delay < prev {
						t.Fatalf("%+v attempt %d jitter %v: Delay %v shrank from %v", p, attempt, jitter, d.Delay, prev)
					}
					prev = d.Delay
					if jitter == 0 && d.Delay != floor {
						t.Fatalf("jitter 0 attempt %d: Delay = %v, want %v", attempt, d.Delay, floor)
					}
					ceiling := doubled(n.RetryBase, attempt-1, n.RetryCap)
					if jitter == almostOne && d.Delay != max(ceiling, min(hint, MaxDelay)) &&
						d.Delay != max(ceiling-time.Nanosecond, min(hint, MaxDelay)) {
						t.Fatalf("jitter ~1 attempt %d: Delay = %v, want ≈ %v", attempt, d.Delay, ceiling)
					}
				}
			}
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		p       Policy
		wantErr string // substring; "" means valid
	}{
		{"zero", Policy{}, ""},
		{"full", Policy{StalenessBound: time.Minute, MaxAttempts: 3, MaxReceives: 3, DeferDelay: time.Second, RetryBase: time.Second, RetryCap: MaxDelay}, ""},
		{"negative staleness", Policy{StalenessBound: -1}, "staleness bound"},
		{"negative attempts", Policy{MaxAttempts: -1}, "max attempts"},
		{"negative receives", Policy{MaxReceives: -1}, "max receives"},
		{"defer delay too long", Policy{DeferDelay: MaxDelay + 1}, "defer delay"},
		{"negative defer delay", Policy{DeferDelay: -1}, "defer delay"},
		{"defer cap too long", Policy{DeferCap: MaxDelay + 1}, "defer cap"},
		{"defer cap below the defer delay", Policy{DeferDelay: time.Minute, DeferCap: time.Second}, "defer cap"},
		{"long defer delay, default cap", Policy{DeferDelay: 10 * time.Minute}, ""},
		{"cap too long", Policy{RetryCap: MaxDelay + 1}, "retry cap"},
		{"base above cap", Policy{RetryBase: time.Minute, RetryCap: time.Second}, "retry base"},
		{"negative base", Policy{RetryBase: -1}, "retry base"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate = %v, want an error about %q", err, tt.wantErr)
			}
		})
	}
}

// TestDefaultsAgree keeps this package's constants in step with the
// topology, which it does not import, and with SQS's delay limit.
func TestDefaultsAgree(t *testing.T) {
	t.Parallel()
	if MaxDelay != 900*time.Second {
		t.Errorf("MaxDelay = %v, want 900s", MaxDelay)
	}
	if MaxReceivesDefault != topology.MaxReceiveCountDefault {
		t.Errorf("MaxReceivesDefault = %d, want topology.MaxReceiveCountDefault = %d", MaxReceivesDefault, topology.MaxReceiveCountDefault)
	}
	if got := (Policy{}).WithDefaults(); got.StalenessBound != 0 {
		t.Errorf("default StalenessBound = %v, want 0 (off)", got.StalenessBound)
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give fmtStringer
		want string
	}{
		{Deliver, "deliver"},
		{Spill, "spill"},
		{Backlog, "backlog"},
		{Drop, "drop"},
		{DeadLetter, "dead_letter"},
		{Defer, "defer"},
		{Requeue, "requeue"},
		{Retry, "retry"},
		{Action(0), "Action(0)"},
		{SourceShard, "shard"},
		{SourceSpillover, "spillover"},
		{SourceBacklog, "backlog"},
		{Source(9), "Source(9)"},
		{Retryable, "retryable"},
		{Permanent, "permanent"},
		{FailureClass(-1), "FailureClass(-1)"},
	}
	for _, tt := range tests {
		if got := tt.give.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

type fmtStringer interface{ String() string }
