package drainer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/router"
	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
)

// oneLane redrives after 3 receives, which also bounds how long a deferred
// job waits (deferral delays double per receive until a requeue resets
// them), so a loaded machine cannot stretch the flood test past its wait.
const oneLane = topotest.OneLane

// TestFloodDoesNotDelayQuietTenants puts a flood from one tenant on its
// shards and, behind it on the same shards, a few jobs from quiet tenants.
// The flood is more than the drainer reads ahead, and no quiet tenant has
// been seen yet: the flood's jobs past its budget are held, not spilled,
// and the pollers read on at the workers' pace (with a probe batch spilled
// whenever one waits 100ms). The quiet jobs, once read, are delivered
// within their fair rate before the flood's tail; a plain FIFO would
// deliver them last. (Whether any job is spilled depends on timing: the
// probes are tested by TestFullReadAheadStillReadsShards, spills behind a
// quiet tenant by TestFailedMoveKeepsJob.)
func TestFloodDoesNotDelayQuietTenants(t *testing.T) {
	t.Parallel()
	onEachBackend(t, oneLane, testFlood)
}

func testFlood(t *testing.T, tb *testBundle) {
	const floodJobs, quietTenants, quietJobsEach = 1500, 8, 5
	now := time.Now()
	shards := router.ShardSet("noisy", "std", 4, 2)
	for i := range floodJobs {
		tb.enqueue(t, tb.topo.ShardQueue("std", shards[i%2]), testEnvelope("noisy", fmt.Sprintf("noisy-%03d", i), now))
	}
	quiet := 0
	for q := range quietTenants {
		for i := range quietJobsEach {
			// Worst case: the quiet jobs sit behind the flood on its shards.
			tb.enqueue(t, tb.topo.ShardQueue("std", shards[(q+i)%2]), testEnvelope(fmt.Sprintf("quiet-%d", q), fmt.Sprintf("quiet-%d-%d", q, i), now))
			quiet++
		}
	}
	rec := newRecorder()
	rec.work = 5 * time.Millisecond // a worker slower than reading, as in life
	d := startDrainer(t, Config{
		Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 4,
		Limits: func(tenant string) scheduler.Limits {
			if tenant == "noisy" {
				return scheduler.Limits{FairRate: 50, FairBurst: 5}
			}
			return scheduler.Limits{FairRate: 1000, FairBurst: 100}
		},
		ReadAhead: 8,
		Policy:    sideliner.Policy{DeferDelay: time.Second},
	})
	order := rec.waitCount(t, floodJobs+quiet)

	lastQuiet, noisyBeforeLastQuiet := -1, 0
	for i, j := range order {
		if j.Tenant != "noisy" {
			lastQuiet = i
		}
	}
	for _, j := range order[:lastQuiet] {
		if j.Tenant == "noisy" {
			noisyBeforeLastQuiet++
		}
	}
	tail := floodJobs - noisyBeforeLastQuiet
	t.Logf("all %d quiet jobs delivered before the flood's tail: %d of %d flood jobs came after the last quiet job (counts %+v)",
		quiet, tail, floodJobs, d.Counts())
	if tail < floodJobs/2 {
		t.Fatalf("only %d of %d flood jobs came after the last quiet job; want the quiet jobs ahead of most of the flood", tail, floodJobs)
	}
}

// TestFreshBeforeBacklog puts old jobs ahead of fresh ones on one shard:
// the old ones go to the backlog queue and the fresh ones are delivered
// first.
func TestFreshBeforeBacklog(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	const oldJobs, freshJobs = 200, 20
	q := tb.topo.ShardQueue("std", 0)
	now := time.Now()
	for i := range oldJobs {
		tb.enqueue(t, q, testEnvelope("t", fmt.Sprintf("old-%03d", i), now.Add(-time.Hour)))
	}
	for i := range freshJobs {
		tb.enqueue(t, q, testEnvelope("t", fmt.Sprintf("fresh-%02d", i), now))
	}
	rec := newRecorder()
	// While the fresh jobs are not yet read, the old ones keep the worker
	// busy (no slot idles); a worker slower than reading, as in life,
	// meets the fresh jobs early.
	rec.work = 5 * time.Millisecond
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 1, StaleReadAhead: 10})
	order := rec.waitCount(t, oldJobs+freshJobs)

	lastFresh, oldBeforeLastFresh := -1, 0
	for i, j := range order {
		if j.Payload[0] == 'f' {
			lastFresh = i
		}
	}
	for _, j := range order[:lastFresh] {
		if j.Payload[0] == 'o' {
			oldBeforeLastFresh++
		}
	}
	t.Logf("%d fresh jobs delivered after only %d of %d old ones (counts %+v)", freshJobs, oldBeforeLastFresh, oldJobs, d.Counts())
	if oldBeforeLastFresh > oldJobs/4 {
		t.Fatalf("%d old jobs were delivered before the last fresh one; want fresh first", oldBeforeLastFresh)
	}
	// StaleReadAhead's worth of stale jobs waits in memory; the rest must
	// be moved to see the fresh ones behind them.
	if c := d.Counts(); c.Backlogged < oldJobs*3/4 {
		t.Fatalf("backlogged %d of %d old jobs; want most moved aside", c.Backlogged, oldJobs)
	}
}

func TestRetryThenDeadLetter(t *testing.T) {
	t.Parallel()
	onEachBackend(t, oneLane, testRetryThenDeadLetter)
}

func testRetryThenDeadLetter(t *testing.T, tb *testBundle) {
	tb.enqueue(t, tb.topo.ShardQueue("std", 1), testEnvelope("t", "poison", time.Now()), testEnvelope("t", "good", time.Now()))
	rec := newRecorder()
	attempts := map[int]bool{}
	rec.fail = func(j *Job) error {
		if j.ID == "poison" {
			attempts[j.Attempt] = true
			return errors.New("worker is broken for this job")
		}
		return nil
	}
	d := startDrainer(t, Config{
		Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 2,
		Policy: sideliner.Policy{MaxAttempts: 3, RetryBase: time.Second, RetryCap: time.Second},
	})
	rec.waitCount(t, 1)
	waitFor(t, func() bool { return d.Counts().DeadLettered == 1 })
	if c := d.Counts(); c.Retried != 2 || len(attempts) != 3 {
		t.Fatalf("counts %+v, attempts seen %v: want 2 retries over attempts 1-3", c, attempts)
	}
	list := deadLetters(t, tb)
	if len(list) != 1 || list[0].GetJobId() != "poison" || list[0].GetDeadLetterReason() != "attempts_exhausted" || list[0].GetAttempts() != 3 ||
		list[0].GetLastError() != "worker is broken for this job" {
		t.Fatalf("DLQ = %v", list)
	}
	// The first attempt's time is stored with the retry and kept: two
	// retries a second apart came after it.
	if first := list[0].GetFirstAttemptAt(); first == nil || time.Since(first.AsTime()) < 2*time.Second {
		t.Fatalf("first attempt at %v: want the first attempt's time, at least 2 retries (1s each) ago", first)
	}
}

func TestPermanentFailureDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	tb.enqueue(t, tb.topo.ShardQueue("std", 2), testEnvelope("t", "bad", time.Now()))
	rec := newRecorder()
	rec.fail = func(*Job) error { return Permanent(errors.New("payload is not JSON")) }
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: rec})
	waitFor(t, func() bool { return d.Counts().DeadLettered == 1 })
	list := deadLetters(t, tb)
	if len(list) != 1 || list[0].GetDeadLetterReason() != "permanent_failure: payload is not JSON" || list[0].GetLastError() != "payload is not JSON" {
		t.Fatalf("DLQ = %v", list)
	}
}

func TestMalformedEnvelopeDeadLetters(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	res, err := tb.backend.Send(t.Context(), &queue.SendParams{Queue: tb.topo.ShardQueue("std", 0), Entries: []queue.SendEntry{{ID: "0", Body: []byte{0xff, 0xff, 0xff}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: newRecorder()})
	waitFor(t, func() bool { return d.Counts().DeadLettered == 1 })
}

func TestTTLExpiredIsDropped(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	e := testEnvelope("t", "late", time.Now())
	e.ExpiresAt = e.GetEnqueuedAt()
	tb.enqueue(t, tb.topo.ShardQueue("std", 0), e, testEnvelope("t", "ok", time.Now()))
	rec := newRecorder()
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: rec})
	got := rec.waitCount(t, 1)
	waitFor(t, func() bool { return d.Counts().Dropped == 1 })
	if got[0].ID != "ok" {
		t.Fatalf("delivered %s", got[0].ID)
	}
}

// TestStopReleasesAndFinishes stops a drainer while one delivery runs and
// more jobs are buffered: the running one finishes and is acked, the
// buffered ones are visible again at once, and nothing is lost.
func TestStopReleasesAndFinishes(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	q := tb.topo.ShardQueue("std", 0)
	for i := range 5 {
		tb.enqueue(t, q, testEnvelope("t", fmt.Sprint("job-", i), time.Now()))
	}
	rec := newRecorder()
	rec.hold = make(chan struct{})
	d, err := New(Config{Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 1, Logger: quietLog, PollWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return stats(t, tb, q).InFlight == 5 }) // one delivering, four buffered
	stopped := make(chan error, 1)
	go func() { stopped <- d.Stop(context.Background()) }()
	waitFor(t, func() bool { return stats(t, tb, q).Visible == 4 })
	close(rec.hold)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if s := stats(t, tb, q); s.Visible != 4 || s.InFlight != 0 || len(rec.delivered()) != 1 || d.Counts().Delivered != 1 {
		t.Fatalf("after stop: %+v, delivered %d, counts %+v", s, len(rec.delivered()), d.Counts())
	}
}

func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	q := tb.topo.ShardQueue("std", 3)
	tb.enqueue(t, q, testEnvelope("t", "contested", time.Now()))
	ctx := t.Context()
	first, err := tb.backend.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1, VisibilityTimeout: time.Second})
	if err != nil || len(first) != 1 {
		t.Fatal(err, first)
	}
	// The first holder stalls past its lease; another consumer takes the job.
	var second []queue.Message
	waitFor(t, func() bool {
		second, err = tb.backend.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1, VisibilityTimeout: 30 * time.Second})
		return err == nil && len(second) == 1
	})
	stale := &lease{backend: tb.backend, queue: q, receipt: first[0].ReceiptHandle}
	if err := stale.extend(ctx, time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale extend: %v, want ErrLeaseLost", err)
	}
	if err := stale.ack(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale ack: %v, want ErrLeaseLost", err)
	}
	current := &lease{backend: tb.backend, queue: q, receipt: second[0].ReceiptHandle}
	if err := current.ack(ctx); err != nil {
		t.Fatalf("current holder's ack: %v", err)
	}
}

// TestHeartbeatKeepsLongJobs runs a job three times longer than its lane's
// visibility timeout: heartbeats keep it from being delivered twice.
func TestHeartbeatKeepsLongJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t, `
lanes:
  - name: std
    shards: 1
    visibility_timeout: 1s
`)
	tb.enqueue(t, tb.topo.ShardQueue("std", 0), testEnvelope("t", "long", time.Now()))
	rec := newRecorder()
	rec.hold = make(chan struct{})
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: rec, Concurrency: 4})
	time.AfterFunc(3*time.Second, func() { close(rec.hold) })
	rec.waitCount(t, 1)
	waitFor(t, func() bool { return d.Counts().Delivered == 1 })
	if got := rec.delivered(); len(got) != 1 || d.Counts().LeaseLost != 0 {
		t.Fatalf("delivered %d times, counts %+v", len(got), d.Counts())
	}
}

func stats(t *testing.T, tb *testBundle, q string) queue.Stats {
	t.Helper()
	return tb.Stats(t, q)
}

var waitFor = topotest.WaitFor
