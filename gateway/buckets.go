package gateway

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// bucketShards spreads tenants over independently locked maps so that
// concurrent Submits of different tenants rarely contend.
const bucketShards = 64

// Buckets holds one token bucket per tenant, created on first use and
// evicted once idle long enough to have refilled (an evicted bucket comes
// back full, exactly as the old one would have been).
type Buckets struct {
	seed   maphash.Seed
	shards [bucketShards]bucketShard
}

type bucketShard struct {
	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	lim      *rate.Limiter
	lastUsed atomic.Int64 // unix nanoseconds
}

// NewBuckets returns an empty set of buckets.
func NewBuckets() *Buckets {
	b := &Buckets{seed: maphash.MakeSeed()}
	for i := range b.shards {
		b.shards[i].m = map[string]*bucket{}
	}
	return b
}

func (b *Buckets) shard(tenant string) *bucketShard {
	return &b.shards[maphash.String(b.seed, tenant)%bucketShards]
}

// Take takes one token from tenant's bucket at now. When the bucket is
// empty it takes nothing and returns the wait until a token will be
// available. A successful take returns an undo func that gives the token
// back (used when a later check refuses the job). Limit changes apply to
// the existing bucket without resetting it.
func (b *Buckets) Take(tenant string, limit rate.Limit, burst int, now time.Time) (undo func(), wait time.Duration) {
	s := b.shard(tenant)
	s.mu.Lock()
	bk := s.m[tenant]
	if bk == nil {
		bk = &bucket{lim: rate.NewLimiter(limit, burst)}
		s.m[tenant] = bk
	}
	s.mu.Unlock()
	bk.lastUsed.Store(now.UnixNano())
	if bk.lim.Limit() != limit {
		bk.lim.SetLimitAt(now, limit)
	}
	if bk.lim.Burst() != burst {
		bk.lim.SetBurstAt(now, burst)
	}
	r := bk.lim.ReserveN(now, 1)
	if !r.OK() {
		return nil, time.Duration(float64(time.Second) / float64(limit))
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, d
	}
	return func() { r.CancelAt(now) }, 0
}

// Sweep evicts buckets unused for longer than idle and returns how many
// remain.
func (b *Buckets) Sweep(now time.Time, idle time.Duration) int {
	cutoff := now.Add(-idle).UnixNano()
	remaining := 0
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		for k, bk := range s.m {
			if bk.lastUsed.Load() < cutoff {
				delete(s.m, k)
			}
		}
		remaining += len(s.m)
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
