package gateway

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The admission benchmarks measure the per-tenant limiter (issue 7: at most
// 120 B of state per tenant with 1,000,000 tenants and 300 ns per decision
// from 2 goroutines over 100,000 tenants) next to the obvious alternative,
// a locked map of *rate.Limiter, in the same run:
//
//	go test -run '^$' -bench 'Admission' -cpu 2 ./gateway/

// taker is what both limiters offer the benchmarks.
type taker interface {
	take(tenant string, now time.Time) bool
}

type bucketsTaker struct{ b *Buckets }

func (t bucketsTaker) take(tenant string, now time.Time) bool {
	_, _, ok := t.b.Take(tenant, 100, 10, now)
	return ok
}

// rateLimiterMap is the baseline: one *rate.Limiter per tenant in a
// sharded, locked map.
type rateLimiterMap struct {
	shards [bucketShards]struct {
		mu sync.Mutex
		m  map[string]*rate.Limiter
	}
	seed maphash.Seed
}

func newRateLimiterMap() *rateLimiterMap {
	m := &rateLimiterMap{seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].m = map[string]*rate.Limiter{}
	}
	return m
}

func (m *rateLimiterMap) take(tenant string, now time.Time) bool {
	s := &m.shards[maphash.String(m.seed, tenant)%bucketShards]
	s.mu.Lock()
	l := s.m[tenant]
	if l == nil {
		l = rate.NewLimiter(100, 10)
		s.m[tenant] = l
	}
	s.mu.Unlock()
	return l.AllowN(now, 1)
}

func tenantIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("tenant-%07d", i)
	}
	return ids
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkAdmissionMemory reports the heap that 1,000,000 tenants' limiter
// state takes, keys included, per tenant.
func BenchmarkAdmissionMemory(b *testing.B) {
	const tenants = 1_000_000
	ids := tenantIDs(tenants)
	for _, lim := range []struct {
		name string
		make func() taker
	}{
		{"gcra", func() taker { return bucketsTaker{NewBuckets()} }},
		{"rate.Limiter", func() taker { return newRateLimiterMap() }},
	} {
		b.Run(lim.name, func(b *testing.B) {
			now := time.Now()
			var perTenant float64
			for b.Loop() {
				before := heapInUse()
				l := lim.make()
				for _, id := range ids {
					l.take(id, now)
				}
				perTenant = float64(heapInUse()-before) / tenants
				runtime.KeepAlive(l)
			}
			b.ReportMetric(perTenant, "B/tenant")
		})
	}
}

// BenchmarkAdmissionDecision reports ns per decision (bucket lookup and
// take) from parallel goroutines (-cpu 2: two) spread over 100,000 tenants.
func BenchmarkAdmissionDecision(b *testing.B) {
	const tenants = 100_000
	ids := tenantIDs(tenants)
	for _, lim := range []struct {
		name string
		make func() taker
	}{
		{"gcra", func() taker { return bucketsTaker{NewBuckets()} }},
		{"rate.Limiter", func() taker { return newRateLimiterMap() }},
	} {
		b.Run(lim.name, func(b *testing.B) {
			l := lim.make()
			now := time.Now()
			for _, id := range ids {
				l.take(id, now)
			}
			var next atomic.Uint64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine walks the tenants with a large odd stride, so
				// consecutive decisions touch unrelated cache lines.
				i := next.Add(1) * 7919
				for pb.Next() {
					i += 104729
					l.take(ids[i%tenants], now)
				}
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/decision")
		})
	}
}
