package scheduler

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkGrant measures one Push, Next and Done with 10, 200, 1,000 and
// 10,000 tenants holding work and 100,000 more known but idle: the cost
// per delivery the drainer pays under its lock. The idle tenants must not
// matter, and the busy ones little: the index finds the next tenant in
// about the logarithm of their number. In the full-lane cases half the
// busy tenants hold jobs of a lane whose one slot is taken (pull workers
// serving it are all busy), and they have the least virtual time: their
// lane is passed over whole, not tenant by tenant.
//
//	go test -run '^$' -bench Grant ./scheduler/
func BenchmarkGrant(b *testing.B) {
	for _, busy := range []int{10, 200, 1000, 10_000} {
		b.Run(fmt.Sprintf("busy=%d", busy), func(b *testing.B) { benchmarkGrant(b, busy, false) })
	}
	for _, busy := range []int{10, 1000} {
		b.Run(fmt.Sprintf("busy=%d/full-lane", busy), func(b *testing.B) { benchmarkGrant(b, busy, true) })
	}
}

func benchmarkGrant(b *testing.B, busy int, fullLane bool) {
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
	ids := make([]string, busy)
	lanes := make([]string, busy)
	for i := range ids {
		ids[i], lanes[i] = fmt.Sprintf("busy-%04d", i), "lane"
		if fullLane && i%2 == 0 {
			lanes[i] = "full"
		}
		for range 5 {
			s.Push(now, ids[i], lanes[i], Fresh, i)
		}
	}
	if fullLane {
		s.SetGroupSlots("full", 1)
		if tk, _ := s.Next(now); tk == nil || tk.Group != "full" { // takes the lane's slot for good
			b.Fatalf("the first grant is %+v, want one of lane full", tk)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		k := i % len(ids)
		if fullLane {
			k = (2*i + 1) % len(ids)
		}
		s.Push(now, ids[k], lanes[k], Fresh, i)
		tk, _ := s.Next(now)
		if tk == nil || tk.Group != "lane" {
			b.Fatalf("granted %+v, want a job of lane", tk)
		}
		s.Done(now, tk, time.Millisecond)
		i++
	}
}
