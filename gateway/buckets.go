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

// Buckets holds one token bucket per tenant as two int64s: its theoretical
// arrival time (TAT) in the generic cell rate algorithm, the instant at
// which the bucket will be full again, and the token interval. A bucket is created on
// first use and evicted once full (an evicted bucket comes back full,
// exactly as the old one would have been), so memory follows the tenants
// active in the last few seconds, at about 70 bytes each.
//
// Every Take passes the tenant's current rate and burst, so a reloaded
// tenant config applies at once to the existing bucket without resetting
// it or any other tenant's: tokens owed carry over at the new rate, and a
// new burst applies at once.
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

// bucketState is one tenant's bucket: its theoretical arrival time and the
// token interval it was computed with, both in nanoseconds.
type bucketState struct {
	tat, interval int64
}

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

// Take takes one token from tenant's bucket, which refills at limit tokens
// per second up to burst, at now. When the bucket is empty it takes nothing
// and returns the wait until a token will be available. A successful take
// returns an undo func that gives the token back (used when a later check
// refuses the job).
func (b *Buckets) Take(tenant string, limit rate.Limit, burst int, now time.Time) (undo func(), wait time.Duration) {
	if limit == rate.Inf {
		return func() {}, 0
	}
	if limit <= 0 || burst < 1 {
		return nil, maxRetry
	}
	interval := int64(float64(time.Second) / float64(limit)) // one token's worth of time
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
	st, ok := s.tat[tenant]
	switch {
	case !ok || st.tat < t:
		st.tat = t // full
	case st.interval != interval:
		// The limit changed (a reloaded config): keep the tokens owed, now
		// repaid at the new rate, as rate.Limiter does.
		owed := float64(st.tat-t) / float64(st.interval)
		st.tat = t + int64(owed*float64(interval))
	}
	st.interval = interval
	st.tat += interval
	if excess := st.tat - t - int64(burst)*interval; excess > 0 {
		s.mu.Unlock()
		return nil, time.Duration(excess)
	}
	if !ok {
		tenant = strings.Clone(tenant) // don't pin the caller's memory (an old tenant config)
	}
	s.tat[tenant] = st
	s.mu.Unlock()
	return func() { b.giveBack(tenant, interval) }, 0
}

// giveBack returns one token to tenant's bucket.
func (b *Buckets) giveBack(tenant string, interval int64) {
	s := b.shard(tenant)
	s.mu.Lock()
	if st, ok := s.tat[tenant]; ok && st.interval == interval {
		st.tat -= interval
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
// share, clamped to [minRetry, maxRetry].
func hwmVerdict(backlog, hwm int64, fraction, drainRate float64) (refused bool, retry time.Duration) {
	threshold := fraction * float64(hwm)
	if float64(backlog) < threshold {
		return false, 0
	}
	excess := float64(backlog) - threshold + 1
	retry = time.Duration(excess / drainRate * float64(time.Second))
	return true, min(max(retry, minRetry), maxRetry)
}

const (
	minRetry = time.Second
	maxRetry = 5 * time.Minute
)
