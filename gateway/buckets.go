package gateway

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// bucketShards spreads tenants over independently locked maps so that
// concurrent Submits of different tenants rarely contend.
const bucketShards = 256

// Buckets holds one token bucket per tenant: its theoretical arrival time
// (TAT) in the generic cell rate algorithm, the instant at which the
// bucket will be full again, the token interval and burst it was computed
// with, and the tokens promised to refused callers. A bucket is created on
// first use and evicted once full (an evicted bucket comes back full,
// exactly as the old one would have been), so memory follows the tenants
// active in the last few seconds, at about 117 bytes each
// (BenchmarkAdmissionMemory, keys included).
//
// Every Take passes the tenant's current rate and burst, so a reloaded
// tenant config applies at once to the existing bucket without resetting
// it or any other tenant's: tokens owed carry over at the new rate, and a
// new burst applies at once.
//
// Refused callers are not all told the same instant. Each refusal reserves
// the next future token and answers its time, so n callers refused
// together get n successive token times; a caller that comes back at its
// time redeems a promised token. Promises are anonymous (any caller at or
// after a due promise's time may redeem it, so the order of the returns
// does not matter) and lapse promiseGrace after their time, their tokens
// lost, which is how a refused caller that never returns costs the tenant
// at most a token. At most maxPromised tokens, no further than
// promiseHorizon ahead, are promised; later refusals are told the time
// after the last promise without a reservation. (Up to maxRetry ahead, a
// flood of callers that never came back left 1,024 promises standing, and
// every caller refused after it was told to wait 3 minutes at 5 jobs/s,
// while the promised tokens came due unclaimed a fifth of a second apart;
// found in a walkthrough.) Reserved tokens count as taken, so over
// time the tenant never gets more than its rate: a redemption takes a
// token that became due by the same rule as any take, and lapsed promises
// only give up tokens. Within a short window, promised callers that come
// back late together can be admitted up to promiseGrace's worth of tokens
// beyond the burst (the bound FuzzBuckets checks).
type Buckets struct {
	seed   maphash.Seed
	epoch  time.Time // TATs are nanoseconds since epoch, on the monotonic clock
	shards [bucketShards]bucketShard
}

type bucketShard struct {
	mu   sync.Mutex
	tat  map[string]bucketState
	last int64    // latest time a Take in this shard used; starts at math.MinInt64
	_    [32]byte // keeps neighbouring shards' locks off one cache line
}

// bucketState is one tenant's bucket, times in nanoseconds since the
// epoch: its theoretical arrival time, the token interval and burst it was
// computed with, and the count of promised tokens. The promises are always
// the last tokens taken (while any is outstanding no token is free, so no
// other take comes after them): the last is due at tat − burst×interval,
// the earlier ones an interval apart before it.
type bucketState struct {
	tat, interval int64
	promised      int32
	burst         int32
}

// firstDue is the due time of the earliest promise; st.promised > 0.
func (st *bucketState) firstDue() int64 {
	return st.tat - int64(st.burst)*st.interval - int64(st.promised-1)*st.interval
}

// Limits on promised tokens per bucket.
const (
	// maxPromised bounds the tokens a bucket reserves for refused callers.
	maxPromised = 1024
	// promiseGrace is how long a promise stays redeemable after it is
	// due (or one token interval, if longer): room for the time the
	// refusal takes to reach the caller (a batch's answer waits for its
	// accepted jobs' commit), the caller's own delays and the small
	// jitter the client adds to a hint. A window of time admits at most
	// this many tokens beyond the burst, and only when promised callers
	// come back late.
	promiseGrace = 250 * time.Millisecond
	// promiseHorizon is how far ahead tokens are promised: the longest
	// wait a refusal for rate can be told while it reserves a token, and
	// about the longest told at all (the time after the last promise).
	promiseHorizon = 10 * time.Second
)

// NewBuckets returns an empty set of buckets.
func NewBuckets() *Buckets {
	b := &Buckets{seed: maphash.MakeSeed(), epoch: time.Now()}
	for i := range b.shards {
		b.shards[i].tat = map[string]bucketState{}
		b.shards[i].last = math.MinInt64 // times before the epoch are valid too
	}
	return b
}

func (b *Buckets) shard(tenant string) *bucketShard {
	return &b.shards[maphash.String(b.seed, tenant)%bucketShards]
}

// Token is a token taken from a bucket; Return gives it back.
type Token struct {
	b        *Buckets
	tenant   string
	interval int64
	due      int64 // the bucket's TAT just after the take: full again then
}

// Return gives the token back at now (used when a later check refuses
// the job, or its send fails). A token given back once the bucket would
// be full again without it (its take is repaid) returns nothing: added to
// a bucket that has refilled and been drawn on since, it would admit more
// than the burst. The zero Token, of an unlimited tenant, returns nothing.
func (t Token) Return(now time.Time) {
	if t.b != nil {
		t.b.giveBack(t.tenant, t.interval, t.due, int64(now.Sub(t.b.epoch)))
	}
}

// Take takes one token from tenant's bucket, which refills at limit tokens
// per second up to burst, at now. When no token is free it takes nothing
// and returns ok false and the wait until the token promised to this
// caller (see Buckets).
func (b *Buckets) Take(tenant string, limit rate.Limit, burst int, now time.Time) (tok Token, wait time.Duration, ok bool) {
	if limit == rate.Inf {
		return Token{}, 0, true
	}
	if limit <= 0 || burst < 1 {
		return Token{}, maxRetry, false
	}
	interval := tokenInterval(limit)
	burst = min(burst, math.MaxInt32, int(maxBucketSpan/interval))
	t := int64(now.Sub(b.epoch))
	s := b.shard(tenant)
	s.mu.Lock()
	// Calls reach the lock in a different order from the times their
	// requests arrived; a time earlier than one already used would look
	// like a burst (rate.Limiter likewise counts no time as passed).
	if t < s.last {
		t = s.last
	}
	s.last = t
	st, found := s.tat[tenant]
	st.take(t, interval, int32(burst))
	var p int64
	switch {
	case st.promised > 0 && st.firstDue() <= t:
		// A due promise: its token was reserved when it was made.
		st.promised--
	case st.tat+interval-t <= int64(burst)*interval:
		st.tat += interval
	default:
		p = st.promise(t)
	}
	if !found {
		tenant = strings.Clone(tenant) // don't pin the caller's memory (an old tenant config)
	}
	s.tat[tenant] = st
	s.mu.Unlock()
	if p != 0 {
		return Token{}, time.Duration(p - t), false
	}
	return Token{b: b, tenant: tenant, interval: interval, due: st.tat}, 0, true
}

// Bounds that keep the bucket's arithmetic (nanoseconds in int64) from
// overflowing for any positive rate and burst a tenant file may give: a
// token's time, and a full bucket's (burst × interval), are at most about
// 9 and 36 years. Past them a tenant is as good as shut off or unbounded;
// unbounded, a rate below about 1e-10/s came out as one token per
// nanosecond and a slow rate with a large burst refused every job.
const (
	maxTokenInterval = int64(1) << 58
	maxBucketSpan    = int64(1) << 60
)

// tokenInterval is one token's worth of time at limit (> 0), in
// nanoseconds: 1 to maxTokenInterval.
func tokenInterval(limit rate.Limit) int64 {
	f := float64(time.Second) / float64(limit)
	if !(f < float64(maxTokenInterval)) {
		return maxTokenInterval
	}
	return max(int64(f), 1)
}

// take brings st to time t with the tenant's current interval and burst:
// changed limits keep the tokens owed (now repaid at the new rate, as
// rate.Limiter does) and drop the promises, whose times were computed with
// the old ones; lapsed promises go; and a bucket without promises that is
// full restarts at t. (With promises outstanding no token is free: every
// take before they lapse redeems one or is refused.)
func (st *bucketState) take(t, interval int64, burst int32) {
	switch {
	case st.interval == 0: // new
		st.tat = t
	case st.interval != interval:
		if st.tat > t {
			owed := float64(st.tat-t) / float64(st.interval)
			st.tat = t + int64(min(owed*float64(interval), float64(maxBucketSpan)))
		}
		st.promised = 0
	case st.burst != burst:
		st.promised = 0
	}
	st.interval, st.burst = interval, burst
	if st.promised > 0 {
		grace := max(interval, int64(promiseGrace))
		if late := t - grace - st.firstDue(); late > 0 {
			st.promised -= int32(min((late+interval-1)/interval, int64(st.promised)))
		}
	}
	if st.promised == 0 && st.tat < t {
		st.tat = t // full
	}
}

// promise answers a refused caller at t with the due time of the next
// future token, reserving it if the limits on promises allow.
func (st *bucketState) promise(t int64) int64 {
	p := st.tat + st.interval - int64(st.burst)*st.interval // when the next token conforms
	if st.promised < maxPromised && p-t <= int64(promiseHorizon) {
		st.tat += st.interval
		st.promised++
	}
	return p
}

// giveBack returns one token, taken with the TAT due, to tenant's bucket
// at t, unless the bucket is full again by t without it; the bucket never
// holds more than its burst (its TAT stays at t or later). With promises
// outstanding the token returned is the last one, and the last promise
// goes with it: its caller finds the token free at its time.
func (b *Buckets) giveBack(tenant string, interval, due, t int64) {
	s := b.shard(tenant)
	s.mu.Lock()
	t = max(t, s.last)
	if st, ok := s.tat[tenant]; ok && st.interval == interval && t < due {
		st.tat = max(st.tat-interval, t)
		if st.promised > 0 {
			st.promised--
		}
		s.tat[tenant] = st
	}
	s.mu.Unlock()
}

// Sweep evicts the buckets that are full at now, which are the same as
// absent ones, and returns how many remain.
func (b *Buckets) Sweep(now time.Time) int {
	t := int64(now.Sub(b.epoch))
	remaining := 0
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		for k, st := range s.tat {
			if st.tat <= t {
				delete(s.tat, k)
			}
		}
		remaining += len(s.tat)
		s.mu.Unlock()
	}
	return remaining
}

// hwmVerdict decides the lane high-water-mark check. A tenant is refused
// when the lane's backlog reaches its tier's share of the mark; the retry
// hint is the time the lane needs, at its drain rate, to get back under that
// share, clamped to [minRetry, maxRetry]. At a drain rate of 0 (nothing
// delivered: no workers) it is stalledRetry: the backlog shrinks only once
// workers come, and a hint of the declared capacity told every caller to
// come back each second throughout an outage (found in a walkthrough).
func hwmVerdict(backlog, hwm int64, fraction, drainRate float64) (refused bool, retry time.Duration) {
	// Compared as shares: backlog/hwm and the fraction are each the
	// nearest float to the same decimal when the backlog is exactly at
	// the share, while fraction × hwm can round above it (0.07 × 100 is
	// 7.000000000000001), which admitted a job at the share.
	if float64(backlog)/float64(hwm) < fraction {
		return false, 0
	}
	if !(drainRate > 0) {
		return true, stalledRetry
	}
	threshold := fraction * float64(hwm)
	excess := max(float64(backlog)-threshold, 0) + 1
	// Clamped as a float: a wait past int64 nanoseconds (a huge backlog
	// over a trickle of deliveries) converts to a negative Duration.
	secs := min(max(excess/drainRate, minRetry.Seconds()), maxRetry.Seconds())
	return true, time.Duration(secs * float64(time.Second))
}

const (
	minRetry = time.Second
	maxRetry = 5 * time.Minute
	// stalledRetry is the backlog hint of a lane that delivers nothing:
	// callers that honour it look again this often until workers come.
	stalledRetry = 10 * time.Second
)
