package drainer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/faultqueue"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/metricstest"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
)

// moveLane has one shard whose jobs come back a second after a failed
// move, backlogs jobs older than a minute, and a redrive threshold high
// enough that the backend's own redrive never ends a test early.
const moveLane = `
max_receive_count: 100
lanes:
  - name: std
    shards: 1
    visibility_timeout: 1s
    staleness_bound: 1m
`

// TestFailedMoveKeepsJob makes the backend fail every send to a move's
// destination: the drainer counts each failed move, the job stays on its
// queue and comes back, and once sends work again the move happens and
// the job reaches its end. Nothing is lost.
func TestFailedMoveKeepsJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// dest is the queue the move sends to.
		dest func(tb *testBundle) string
		// arrange enqueues the jobs and returns the drainer's config,
		// with Backend, Topology and Metrics still to fill in; after the
		// backend works again, done (when set) lets the job finish.
		arrange func(t *testing.T, tb *testBundle, rec *recorder) (cfg Config, done func())
		// moved is the count of the move that failed, from Counts.
		moved func(Counts) int64
		// finished reports, once the move went through, that the job
		// reached its end.
		finished func(t *testing.T, tb *testBundle, rec *recorder) bool
	}{
		{
			name: "backlog",
			dest: func(tb *testBundle) string { return tb.topo.BacklogQueue("std") },
			arrange: func(t *testing.T, tb *testBundle, rec *recorder) (Config, func()) {
				// The one slot runs a job until done and one stale job
				// waits in memory (StaleReadAhead): the others must be
				// moved aside.
				rec.hold = make(chan struct{})
				old := time.Now().Add(-time.Hour)
				tb.enqueue(t, tb.topo.ShardQueue("std", 0), testEnvelope("t", "fresh", time.Now()),
					testEnvelope("t", "stale-1", old), testEnvelope("t", "stale-2", old), testEnvelope("t", "stale-3", old), testEnvelope("t", "stale-4", old))
				return Config{Handler: rec, Concurrency: 1, StaleReadAhead: 1}, func() { close(rec.hold) }
			},
			moved:    func(c Counts) int64 { return c.Backlogged },
			finished: delivered("fresh", "stale-1", "stale-2", "stale-3", "stale-4"),
		},
		{
			name: "spillover",
			dest: func(tb *testBundle) string { return tb.topo.SpilloverQueue("std") },
			arrange: func(t *testing.T, tb *testBundle, rec *recorder) (Config, func()) {
				// One job holds the tenant's only in-flight slot until
				// done, one more fits its read-ahead, and the rest is
				// spilled: a quiet tenant read just before makes reading
				// past the full tenant worth a move (sideliner.Lookout).
				rec.hold = make(chan struct{})
				tb.enqueue(t, tb.topo.ShardQueue("std", 0), testEnvelope("q", "quiet", time.Now()),
					testEnvelope("t", "first", time.Now()), testEnvelope("t", "second", time.Now()), testEnvelope("t", "third", time.Now()))
				return Config{
					Handler:   rec,
					Limits:    func(string) scheduler.Limits { return scheduler.Limits{MaxInFlight: 1} },
					ReadAhead: 1,
				}, func() { close(rec.hold) }
			},
			moved:    func(c Counts) int64 { return c.Spilled },
			finished: delivered("quiet", "first", "second", "third"),
		},
		{
			name: "dead-letter queue",
			dest: func(tb *testBundle) string { return tb.topo.DLQ("std") },
			arrange: func(t *testing.T, tb *testBundle, _ *recorder) (Config, func()) {
				tb.enqueue(t, tb.topo.ShardQueue("std", 0), testEnvelope("t", "poison", time.Now()))
				return Config{Handler: HandlerFunc(func(context.Context, *Job) error {
					return Permanent(errors.New("cannot parse"))
				})}, nil
			},
			moved: func(c Counts) int64 { return c.DeadLettered },
			finished: func(t *testing.T, tb *testBundle, _ *recorder) bool {
				return stats(t, tb, tb.topo.DLQ("std")).Visible == 1
			},
		},
		{
			name: "retry",
			dest: func(tb *testBundle) string { return tb.topo.ShardQueue("std", 0) },
			arrange: func(t *testing.T, tb *testBundle, rec *recorder) (Config, func()) {
				rec.fail = func(j *Job) error {
					if j.Attempt == 1 {
						return errors.New("worker restarting")
					}
					return nil
				}
				tb.enqueue(t, tb.topo.ShardQueue("std", 0), testEnvelope("t", "flaky", time.Now()))
				return Config{Handler: rec, Policy: sideliner.Policy{RetryBase: time.Second, RetryCap: time.Second}}, nil
			},
			moved:    func(c Counts) int64 { return c.Retried },
			finished: delivered("flaky"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, moveLane)
			rec := newRecorder()
			cfg, done := tt.arrange(t, tb, rec)
			dest := tt.dest(tb)
			fq := faultqueue.New(tb.backend)
			fq.Inject(faultqueue.Unavailable(dest, faultqueue.OpSend))
			reg := prometheus.NewPedanticRegistry()
			cfg.Backend, cfg.Topology, cfg.Metrics = fq, tb.topo, metrics.New(reg, metrics.Options{})
			d := startDrainer(t, cfg)

			// Two failed moves: the job came back after the first.
			waitFor(t, func() bool { return d.Counts().MoveFailed >= 2 })
			if c := d.Counts(); tt.moved(c) != 0 {
				t.Fatalf("counts %+v: a move counted though every send to %s failed", c, dest)
			}
			if dest != tb.topo.ShardQueue("std", 0) {
				if s := stats(t, tb, dest); s.Visible+s.InFlight+s.Delayed != 0 {
					t.Fatalf("%s holds %+v though every send to it failed", dest, s)
				}
			}
			if s := stats(t, tb, tb.topo.ShardQueue("std", 0)); s.Visible+s.InFlight+s.Delayed == 0 {
				t.Fatalf("the shard is empty after failed moves: the job was lost")
			}

			fq.Wakeup()
			waitFor(t, func() bool { return tt.moved(d.Counts()) >= 1 })
			if done != nil {
				done()
			}
			waitFor(t, func() bool { return tt.finished(t, tb, rec) })

			c := d.Counts()
			// A failed send fails every job of its batch.
			if failed := fq.Failed(faultqueue.OpSend); c.MoveFailed < failed || c.MoveFailed > failed*queue.MaxBatch {
				t.Errorf("MoveFailed = %d, but the backend failed %d sends", c.MoveFailed, failed)
			}
			if got := metricstest.CounterSum(t, reg, metrics.NameDrainActions, map[string]string{"action": metrics.ActionMoveFailed}); got != float64(c.MoveFailed) {
				t.Errorf("%s{action=%q} = %g, want MoveFailed = %d", metrics.NameDrainActions, metrics.ActionMoveFailed, got, c.MoveFailed)
			}
		})
	}
}

// delivered reports whether the jobs with these ids were all delivered.
func delivered(ids ...string) func(t *testing.T, tb *testBundle, rec *recorder) bool {
	return func(_ *testing.T, _ *testBundle, rec *recorder) bool {
		seen := map[string]bool{}
		for _, j := range rec.delivered() {
			seen[j.ID] = true
		}
		for _, id := range ids {
			if !seen[id] {
				return false
			}
		}
		return true
	}
}
