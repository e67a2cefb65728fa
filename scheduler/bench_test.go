package scheduler

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkGrant measures one Push, Next and Done with 200 tenants
// holding work and 100,000 more known but idle: the cost per delivery
// the drainer pays under its lock. The idle tenants must not matter.
//
//	BenchmarkGrant-2   	  237314	      5729 ns/op	     112 B/op	       1 allocs/op
func BenchmarkGrant(b *testing.B) {
	s, err := New[int](Config{Slots: 64, Limits: func(string) Limits { return Limits{FairRate: 100, FairBurst: 10} }})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for i := range 100_000 {
		id := fmt.Sprintf("idle-%06d", i)
		s.Push(now, id, "lane", Fresh, i)
		tk, _ := s.Next(now)
		s.Done(now, tk, time.Millisecond)
	}
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprintf("busy-%03d", i)
		for range 5 {
			s.Push(now, ids[i], "lane", Fresh, i)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		s.Push(now, ids[i%len(ids)], "lane", Fresh, i)
		tk, _ := s.Next(now)
		s.Done(now, tk, time.Millisecond)
		i++
	}
}
