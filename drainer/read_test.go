package drainer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/proccpu"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
)

// TestFullReadAheadStillReadsShards fills the read-ahead with three
// floods, on the shards and in the spillover queue, whose deliveries never
// finish, so no room is ever freed; a quiet tenant's job sent to a shard
// afterwards must still be read and delivered on the slot left free. When
// one bound held fresh and sideline jobs together, the floods' budgets
// and the sideline read-ahead filled it and the shard pollers stopped
// for good.
func TestFullReadAheadStillReadsShards(t *testing.T) {
	t.Parallel()
	onEachBackend(t, oneLane, testFullReadAhead)
}

func testFullReadAhead(t *testing.T, tb *testBundle) {
	const floods, perQueue = 3, 400
	now := time.Now()
	for f := range floods {
		tenant := fmt.Sprintf("noisy-%d", f)
		var fresh, spilled []*envelope.Envelope
		for i := range perQueue {
			fresh = append(fresh, testEnvelope(tenant, fmt.Sprintf("%s-fresh-%03d", tenant, i), now))
			spilled = append(spilled, testEnvelope(tenant, fmt.Sprintf("%s-spilled-%03d", tenant, i), now))
		}
		tb.enqueue(t, tb.topo.ShardQueue("std", f), fresh...)
		tb.enqueue(t, tb.topo.SpilloverQueue("std"), spilled...)
	}
	quiet, release := make(chan *Job, 1), make(chan struct{})
	handler := HandlerFunc(func(ctx context.Context, j *Job) error {
		if j.Tenant == "quiet" {
			quiet <- j
			return nil
		}
		select { // a flood's job does not finish before the test ends
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	d := startDrainer(t, Config{
		Backend: tb.backend, Topology: tb.topo, Handler: handler, Concurrency: floods + 1,
		Limits: func(tenant string) scheduler.Limits {
			if tenant == "quiet" {
				return scheduler.Limits{}
			}
			return scheduler.Limits{MaxInFlight: 1} // leaves a slot for the quiet job
		},
	})
	t.Cleanup(func() { close(release) }) // before the drainer stops
	// Wait until the floods hold what they may: the sideline read-ahead
	// and their fresh budgets.
	deadline := time.Now().Add(60 * time.Second)
	for last := -1; ; {
		time.Sleep(500 * time.Millisecond)
		held := d.Held()
		if held == last && held > d.sideMax {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the read-ahead kept changing for 60s (%d held)", held)
		}
		last = held
	}
	t.Logf("%d jobs held (sideline read-ahead %d, fresh read-ahead %d); counts %+v", d.Held(), d.sideMax, d.heldMax, d.Counts())

	tb.enqueue(t, tb.topo.ShardQueue("std", 3), testEnvelope("quiet", "quiet-0", time.Now()))
	select {
	case j := <-quiet:
		t.Logf("quiet job delivered %s after it was sent", time.Since(j.EnqueuedAt).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("the quiet job was not delivered within 30s (%d jobs held, counts %+v)", d.Held(), d.Counts())
	}
}

// TestEvenBacklogIsNotMovedAside drains a backlog shared evenly by a few
// tenants, every one of them over its read-ahead. No tenant is quiet, so
// nothing is gained by reading past them: the jobs are held, not spilled
// (a spill is two more store calls now and two later for each job).
// Before the lookout, every job past a tenant's budget was spilled.
func TestEvenBacklogIsNotMovedAside(t *testing.T) {
	t.Parallel()
	onEachBackend(t, oneLane, testEvenBacklog)
}

func testEvenBacklog(t *testing.T, tb *testBundle) {
	const tenants, jobsEach = 6, 150
	now := time.Now()
	for s := range 2 {
		var envs []*envelope.Envelope
		for i := range jobsEach {
			for k := range tenants {
				if (i+k)%2 == s {
					envs = append(envs, testEnvelope(fmt.Sprintf("t%d", k), fmt.Sprintf("t%d-%03d", k, i), now))
				}
			}
		}
		tb.enqueue(t, tb.topo.ShardQueue("std", s), envs...)
	}
	rec := newRecorder()
	rec.work = time.Millisecond
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 4, ReadAhead: 8})
	order := rec.waitCount(t, tenants*jobsEach)
	c := d.Counts()
	t.Logf("%d delivered; counts %+v", len(order), c)
	if c.Spilled > tenants*jobsEach/10 {
		t.Fatalf("%d of %d jobs were moved aside, with no quiet tenant to find behind them", c.Spilled, tenants*jobsEach)
	}
}

// TestUnevenShardsAreNotMovedAside drains a backlog in which one shard
// holds two tenants' jobs and the other six tenants', faster than the
// shards are read: tenants swing between a full share of the read-ahead
// and a low one. Moving a full tenant's jobs aside finds a low tenant's
// only on the shard it was read from, and pays only when holding the job
// would not fit: the lookout judged the lane as a whole and spilled at
// every low sighting, about a quarter of these jobs (and about 40 % of a
// 10-tenant backlog in the drain benchmark).
func TestUnevenShardsAreNotMovedAside(t *testing.T) {
	t.Parallel()
	onEachBackend(t, oneLane, testUnevenShards)
}

func testUnevenShards(t *testing.T, tb *testBundle) {
	now := time.Now()
	shards := [][]string{{"a", "b"}, {"c", "d", "e", "f", "g", "h"}}
	const perShard = 5000
	total := 0
	for s, tenants := range shards {
		envs := make([]*envelope.Envelope, perShard)
		for i := range envs {
			k := tenants[i%len(tenants)]
			envs[i] = testEnvelope(k, fmt.Sprintf("%s-%03d", k, i), now)
		}
		tb.enqueue(t, tb.topo.ShardQueue("std", s), envs...)
		total += perShard
	}
	rec := newRecorder()
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 64})
	order := rec.waitCount(t, total)
	c := d.Counts()
	t.Logf("%d delivered; counts %+v", len(order), c)
	if c.Spilled > int64(total/10) {
		t.Fatalf("%d of %d jobs were moved aside, on a shard with no tenant short of jobs", c.Spilled, total)
	}
}

// TestReadAheadFollowsSlots: a drainer whose Concurrency is high (pull
// mode's 1,024) but which has one slot (one worker credit connected)
// holds no more than one slot's read-ahead. It used to read for its
// Concurrency (16,384 jobs and more) and keep them, leased and out of
// sight of the other drainers of a fleet, whose workers could sit idle.
func TestReadAheadFollowsSlots(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	const jobs = 3000
	now := time.Now()
	envs := make([]*envelope.Envelope, jobs)
	for i := range envs {
		envs[i] = testEnvelope("t", fmt.Sprintf("job-%04d", i), now)
	}
	tb.enqueue(t, tb.topo.ShardQueue("std", 0), envs...)
	release := make(chan struct{})
	handler := HandlerFunc(func(ctx context.Context, _ *Job) error {
		select { // no job finishes: nothing frees room
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	d, err := New(Config{
		Backend: tb.backend, Topology: tb.topo, Handler: handler, Concurrency: 1024,
		Policy: sideliner.Policy{NoSideline: true}, // every job read is held, none moved
	})
	if err != nil {
		t.Fatal(err)
	}
	d.SetCapacity(1, nil)
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	d.mu.Lock()
	bound := d.heldMax
	d.mu.Unlock()
	// Wait until the pollers stop for want of room: the count holds still.
	last, still := -1, 0
	for deadline := time.Now().Add(20 * time.Second); still < 5 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		n := d.Held()
		if n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	// Pollers that found room at once each add a batch past the bound.
	if want := 1024 + 2*d.receivers*queue.MaxBatch; last > want || bound > 1024+d.receivers*queue.MaxBatch {
		t.Errorf("with 1 slot of 1,024 the drainer holds %d jobs (bound %d), want at most 1,024 and a batch or two per poller (%d)", last, bound, want)
	}
	if last < 1000 {
		t.Errorf("held %d jobs, want the read-ahead filled (about 1,024)", last)
	}
}

// TestFullReadAheadWaitsWithoutSpinning holds a backlog of ten tenants,
// none of them quiet, behind slots that never free. The shard pollers
// read on only as probes, paced by the tenants' budgets; then the slots
// shrink (a pull worker left) and the read-ahead is over its bound. The
// pollers must wait for room without using the CPU. One that had waited
// for a probe and then found no room waited on the probe's time, long
// past: it looked again at once, for ever. Pollers that read together
// past the bound did the same: beside a pull worker that stopped
// answering with the ceiling's slots, a drainer spun on both cores (2 ms
// of CPU for each job it still delivered to the other worker; 51 µs
// after the fix).
func TestFullReadAheadWaitsWithoutSpinning(t *testing.T) {
	tb := setup(t, oneLane)
	now := time.Now()
	for s := range 4 {
		envs := make([]*envelope.Envelope, 0, 1000)
		for i := range cap(envs) {
			tenant := fmt.Sprintf("t%d", i%10)
			envs = append(envs, testEnvelope(tenant, fmt.Sprintf("%s-%d-%03d", tenant, s, i), now))
		}
		tb.enqueue(t, tb.topo.ShardQueue("std", s), envs...)
	}
	rec := newRecorder()
	rec.hold = make(chan struct{})
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 128})
	t.Cleanup(func() { close(rec.hold) }) // before the drainer stops
	fresh := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.sched.HeldIn(scheduler.Fresh)
	}
	for deadline := time.Now().Add(30 * time.Second); fresh() <= d.freshMax(); {
		if time.Now().After(deadline) {
			t.Fatalf("the read-ahead did not reach the budgets in 30s: %d fresh jobs held, budgets %d", fresh(), d.freshMax())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3 * probeEvery) // the pollers wait for their probes
	d.SetCapacity(8, nil)
	if room := d.heldMax - fresh(); room >= queue.MaxBatch {
		t.Fatalf("the read-ahead has room for %d more after the slots shrank", room)
	}
	time.Sleep(3 * probeEvery)

	const window = time.Second
	cpu := proccpu.Used()
	time.Sleep(window)
	used := proccpu.Used() - cpu
	t.Logf("%v of CPU in %v", used, window)
	if used > window/5 {
		t.Fatalf("the drainer used %v of CPU in %v while it could neither deliver nor read (%d fresh jobs held, room for %d)", used, window, fresh(), d.heldMax)
	}
}
