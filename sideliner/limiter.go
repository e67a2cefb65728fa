package sideliner

import (
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// IdleTTLDefault is how long a tenant's drain state is kept unused before
// Sweep may evict it.
const IdleTTLDefault = 10 * time.Minute

// limiterShards spreads tenants over independently locked maps so that
// deliveries of different tenants rarely contend.
const limiterShards = 64

// Limits are one tenant's drain limits, resolved (tier defaults applied) by
// the caller.
type Limits struct {
	// DrainRate is the jobs per second delivered before the rest are held
	// back. Zero, negative, NaN or +Inf mean no rate limit.
	DrainRate float64
	// DrainBurst is the drain bucket's size; below 1 counts as 1.
	DrainBurst int
	// MaxInFlight is the most deliveries at once. Zero or negative mean no
	// limit.
	MaxInFlight int
}

func (l Limits) rateLimited() bool { return l.DrainRate > 0 && !math.IsInf(l.DrainRate, 1) }

// LimiterConfig configures a Limiter.
type LimiterConfig struct {
	// Limits returns a tenant's limits. Required. It is called on every
	// Check and Acquire, outside the Limiter's locks, so it must be fast and
	// safe for concurrent use. A change in what it returns takes effect at
	// the tenant's next call without resetting its bucket or anyone else's.
	Limits func(tenant string) Limits
	// IdleTTL is how long a tenant must go unused before Sweep may evict its
	// state. Defaults to 10 minutes.
	IdleTTL time.Duration
}

// Limiter is the drainers' per-tenant drain state: a token bucket
// (golang.org/x/time/rate) bounding each tenant's delivery rate and a
// counting semaphore bounding its deliveries in flight. It does no I/O and
// reads no clock: every call takes now. It is safe for concurrent use.
//
// Memory stays bounded with many tenants: Sweep evicts a tenant that has
// been unused for IdleTTL, has nothing in flight and whose bucket has
// refilled, so an evicted tenant comes back exactly as it left (full
// bucket, no slots held) and eviction is invisible to the limits.
type Limiter struct {
	limits  func(string) Limits
	idleTTL time.Duration
	seed    maphash.Seed
	shards  [limiterShards]limiterShard
}

type limiterShard struct {
	mu sync.Mutex
	m  map[string]*tenantState // guarded by mu, as is every tenantState
}

type tenantState struct {
	bucket      *rate.Limiter // nil when the tenant has no rate limit
	maxInFlight int           // ≤ 0: no limit
	inFlight    int
	// last is the latest time seen for this tenant. Times before it are
	// raised to it, so a caller whose clock reading lost a race to the lock
	// cannot earn tokens twice; it also dates the tenant's last use.
	last time.Time
}

// Status is a tenant's drain state at one instant.
type Status struct {
	// OverRate means the tenant's bucket holds no token.
	OverRate bool
	// AtConcurrency means the tenant's in-flight limit is reached.
	AtConcurrency bool
	// Wait is the time until the bucket holds a token; zero unless
	// OverRate.
	Wait time.Duration
	// InFlight is the number of deliveries the tenant holds.
	InFlight int
}

// Reason returns over_rate, at_concurrency (in that order of precedence,
// as in Decide), or "" when the tenant is within its limits.
func (s Status) Reason() Reason {
	switch {
	case s.OverRate:
		return ReasonOverRate
	case s.AtConcurrency:
		return ReasonAtConcurrency
	}
	return ""
}

// NewLimiter validates cfg and returns an empty Limiter.
func NewLimiter(cfg LimiterConfig) (*Limiter, error) {
	if cfg.Limits == nil {
		return nil, errors.New("sideliner limiter: Limits is required")
	}
	if cfg.IdleTTL < 0 {
		return nil, errors.New("sideliner limiter: IdleTTL must not be negative")
	}
	if cfg.IdleTTL == 0 {
		cfg.IdleTTL = IdleTTLDefault
	}
	l := &Limiter{limits: cfg.Limits, idleTTL: cfg.IdleTTL, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = map[string]*tenantState{}
	}
	return l, nil
}

func (l *Limiter) shard(tenant string) *limiterShard {
	return &l.shards[maphash.String(l.seed, tenant)%limiterShards]
}

// Check reports tenant's state at now without consuming anything. A tenant
// the Limiter holds no state for is within its limits (a fresh bucket is
// full) and Check does not create state for it.
func (l *Limiter) Check(tenant string, now time.Time) Status {
	limits := l.limits(tenant)
	s := l.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.m[tenant]
	if ts == nil {
		return Status{}
	}
	now = ts.observe(now, limits)
	return ts.status(now)
}

// Acquire takes one token and one in-flight slot of tenant's at now, both or
// neither, under one lock: the Status that refuses a delivery is the state a
// delivery would have consumed. When ok, the caller must call release once
// the delivery ends; release is idempotent. When not ok, nothing is taken,
// st says why, and release is a no-op.
func (l *Limiter) Acquire(tenant string, now time.Time) (release func(), ok bool, st Status) {
	limits := l.limits(tenant)
	s := l.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.m[tenant]
	if ts == nil {
		ts = &tenantState{}
		s.m[tenant] = ts
	}
	now = ts.observe(now, limits)
	st = ts.status(now)
	if st.OverRate || st.AtConcurrency {
		return noop, false, st
	}
	if ts.bucket != nil && !ts.bucket.AllowN(now, 1) {
		// Unreachable: status found a token under the same lock.
		return noop, false, Status{OverRate: true, Wait: tokenWait(ts.bucket, now), InFlight: ts.inFlight}
	}
	ts.inFlight++
	var done atomic.Bool
	release = func() {
		if !done.CompareAndSwap(false, true) {
			return
		}
		s.mu.Lock()
		ts.inFlight-- // ts cannot be evicted while it holds a slot
		s.mu.Unlock()
	}
	return release, true, Status{InFlight: ts.inFlight}
}

// Admit decides a message and, when the decision is Deliver, acquires the
// tenant's token and slot in the same step. The tenant fields of in are
// ignored: when Acquire refuses, the message is decided again with the
// refusing Status, so it is spilled or deferred on exactly the state that
// a delivery would have consumed. Decisions other than Deliver consume
// nothing, and with p.NoSideline nothing is consumed at all. release is
// non-nil; it is a no-op unless the decision is Deliver, and then it must
// be called once the delivery ends.
func (l *Limiter) Admit(p Policy, tenant string, in Input) (d Decision, release func()) {
	in.TenantOverRate, in.TenantAtConcurrency, in.TenantWait = false, false, 0
	if d = p.Decide(in); d.Action != Deliver || p.NoSideline {
		return d, noop
	}
	release, ok, st := l.Acquire(tenant, in.Now)
	if ok {
		return d, release
	}
	in.TenantOverRate, in.TenantAtConcurrency, in.TenantWait = st.OverRate, st.AtConcurrency, st.Wait
	return p.Decide(in), noop
}

// Sweep evicts every tenant unused for at least IdleTTL before now, with
// nothing in flight and a full bucket, and returns how many it evicted and
// how many remain. Call it periodically (every IdleTTL/2, say); each shard
// is locked in turn, never the whole Limiter.
func (l *Limiter) Sweep(now time.Time) (evicted, remaining int) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for tenant, ts := range s.m {
			if ts.evictable(now, l.idleTTL) {
				delete(s.m, tenant)
				evicted++
			}
		}
		remaining += len(s.m)
		s.mu.Unlock()
	}
	return evicted, remaining
}

// Len returns the number of tenants the Limiter holds state for.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// observe raises now to the latest time seen, records it, applies limits
// and returns the time to use.
func (ts *tenantState) observe(now time.Time, limits Limits) time.Time {
	if now.Before(ts.last) {
		now = ts.last
	}
	ts.last = now
	ts.maxInFlight = limits.MaxInFlight
	if !limits.rateLimited() {
		ts.bucket = nil
		return now
	}
	r, b := rate.Limit(limits.DrainRate), max(limits.DrainBurst, 1)
	switch {
	case ts.bucket == nil:
		ts.bucket = rate.NewLimiter(r, b) // new, or newly limited: starts full
	default:
		if ts.bucket.Limit() != r {
			ts.bucket.SetLimitAt(now, r)
		}
		if ts.bucket.Burst() != b {
			ts.bucket.SetBurstAt(now, b)
		}
	}
	return now
}

func (ts *tenantState) status(now time.Time) Status {
	st := Status{InFlight: ts.inFlight}
	if ts.bucket != nil {
		st.Wait = tokenWait(ts.bucket, now)
		st.OverRate = st.Wait > 0
	}
	st.AtConcurrency = ts.maxInFlight > 0 && ts.inFlight >= ts.maxInFlight
	return st
}

func (ts *tenantState) evictable(now time.Time, idleTTL time.Duration) bool {
	if ts.inFlight > 0 || now.Sub(ts.last) < idleTTL {
		return false
	}
	return ts.bucket == nil || ts.bucket.TokensAt(now) >= float64(ts.bucket.Burst())
}

// tokenWait is the time until b holds one token at now, computed as
// rate.Limiter.AllowN does, so that a zero wait means AllowN(now, 1)
// succeeds.
func tokenWait(b *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - b.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	d := missing / float64(b.Limit()) * float64(time.Second)
	if d > float64(math.MaxInt64) {
		return math.MaxInt64
	}
	return time.Duration(d)
}

func noop() {}
