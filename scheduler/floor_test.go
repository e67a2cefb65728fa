package scheduler

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestQuietWaitFloorOfAnyScheduler models the best any scheduler could do
// for quiet tenants beside a flood, with no job preempted: strict priority
// (a quiet job always takes the next free slot), and the flood's jobs
// started only while more than reserve slots are free. It runs the
// fairness bench's mix (16 slots, jobs of 40 ms ± 25 %, 9 quiet tenants
// at 20 jobs/s from random phases, a flood that always has work) for
// reserves of 0 to 4 slots and logs the quiet jobs' p99 wait for a slot
// beside the slots' utilization.
//
// Issue 13 asks for a quiet p99 dwell within 1.5× the dwell without noise
// (about 1 ms on these machines: a wait under 0.5 ms) and for utilization
// of at least 0.95 in the same run. The model shows that no reserve gives
// both, so no scheduler that lets jobs run to their end can: with every
// slot busy, a quiet job waits for one to finish (p99 12 ms), and each
// slot held free for quiet jobs costs about 1/16 of the workers.
//
//	go test -run QuietWaitFloorOfAnyScheduler -v ./scheduler/
func TestQuietWaitFloorOfAnyScheduler(t *testing.T) {
	t.Parallel()
	const (
		slots  = 16
		cost   = 40 * time.Millisecond
		spread = 0.25
		run    = 60 * time.Second
		quiet  = 9
		rate   = 20.0 // jobs/s per quiet tenant
	)
	met := false
	for reserve := range 5 {
		p99, util := strictPriorityFloor(slots, reserve, cost, spread, run, quiet, rate)
		t.Logf("reserve %d of %d slots: quiet p99 wait %v, utilization %.3f", reserve, slots, p99.Round(10*time.Microsecond), util)
		if util >= 0.95 && p99 <= 500*time.Microsecond {
			met = true
		}
		if reserve == 0 && (util < 0.999 || p99 < cost/8) {
			t.Errorf("without a reserve: p99 wait %v, utilization %.3f; want every slot busy and a wait of several ms", p99, util)
		}
	}
	if met {
		t.Error("a reserve met both a quiet p99 wait ≤ 0.5 ms and utilization ≥ 0.95: the floor argument in docs/operations.md no longer holds")
	}
}

// strictPriorityFloor simulates slots running jobs of cost ± spread: quiet
// tenants' jobs arrive periodically (random phases) and take the next free
// slot, first come first served; a flood that always has work takes a
// free slot only while more than reserve are free. It returns the quiet
// jobs' p99 wait for a slot and the fraction of slot time busy.
func strictPriorityFloor(slots, reserve int, cost time.Duration, spread float64, run time.Duration, quiet int, rate float64) (time.Duration, float64) {
	rng := rand.New(rand.NewPCG(13, 13)) // the same arrivals and job times for every reserve
	period := time.Duration(float64(time.Second) / rate)
	var arrivals []time.Duration
	for range quiet {
		for at := time.Duration(rng.Int64N(int64(period))); at < run; at += period {
			arrivals = append(arrivals, at)
		}
	}
	slices.Sort(arrivals)
	jobTime := func() time.Duration {
		return time.Duration(float64(cost) * (1 + spread*(2*rng.Float64()-1)))
	}
	var (
		ends    durationHeap
		waiting []time.Duration // arrival times of quiet jobs waiting for a slot
		waits   []time.Duration
		busy    time.Duration
	)
	start := func(now time.Duration) {
		d := jobTime()
		busy += d
		heap.Push(&ends, now+d)
	}
	fill := func(now time.Duration) {
		for len(ends) < slots && len(waiting) > 0 {
			waits = append(waits, now-waiting[0])
			waiting = waiting[1:]
			start(now)
		}
		for slots-len(ends) > reserve {
			start(now)
		}
	}
	fill(0)
	for _, at := range arrivals {
		for len(ends) > 0 && ends[0] <= at {
			fill(heap.Pop(&ends).(time.Duration))
		}
		waiting = append(waiting, at)
		fill(at)
	}
	for len(waiting) > 0 {
		fill(heap.Pop(&ends).(time.Duration))
	}
	slices.Sort(waits)
	return waits[len(waits)*99/100], busy.Seconds() / (float64(slots) * run.Seconds())
}

type durationHeap []time.Duration

func (h durationHeap) Len() int           { return len(h) }
func (h durationHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h durationHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *durationHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *durationHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
