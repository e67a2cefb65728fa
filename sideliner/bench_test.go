package sideliner

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDecide-2         	27929082	        43.45 ns/op	       0 B/op	       0 allocs/op
func BenchmarkDecide(b *testing.B) {
	p := Policy{StalenessBound: 5 * time.Minute}
	in := Input{Now: t0, Source: SourceSpillover, EnqueuedAt: t0.Add(-time.Minute), ReceiveCount: 2, TenantOverRate: true, Jitter: 0.3}
	b.ReportAllocs()
	for b.Loop() {
		if p.Decide(in).Action != Defer {
			b.Fatal("want defer")
		}
	}
}

// BenchmarkLimiterAdmit measures a Deliver decision with its acquire and
// release over 10,000 tenants.
//
// BenchmarkLimiterAdmit-2   	 4039339	       280.3 ns/op	      36 B/op	       2 allocs/op
func BenchmarkLimiterAdmit(b *testing.B) {
	l, err := NewLimiter(LimiterConfig{Limits: func(string) Limits {
		return Limits{DrainRate: 1e9, DrainBurst: 1000, MaxInFlight: 1000}
	}})
	if err != nil {
		b.Fatal(err)
	}
	tenants := make([]string, 10_000)
	for i := range tenants {
		tenants[i] = fmt.Sprint("tenant-", i)
	}
	p := Policy{}
	in := Input{Now: t0, Source: SourceShard, ReceiveCount: 1}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		in.Now = in.Now.Add(time.Microsecond)
		d, release := l.Admit(p, tenants[i%len(tenants)], in)
		if d.Action != Deliver {
			b.Fatal(d)
		}
		release()
		i++
	}
}
