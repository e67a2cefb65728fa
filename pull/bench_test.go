package pull_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/proccpu"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/worker"
)

// BenchmarkPullDrain reports jobs/s from 4 preloaded shard queues through
// a drainer and its hub to worker.Connect workers that do nothing, all in
// this process over loopback gRPC streams: the pull path's own cost per
// job (receive, schedule, send, answer, ack). The same 64 credits are
// granted by one worker, by 16 of 4 credits and by 64 of one: each
// worker has its own connection, and its jobs and answers travel in
// batches of at most its credits.
//
//	go test -run '^$' -bench PullDrain -benchtime 20000x ./pull/
func BenchmarkPullDrain(b *testing.B) {
	for _, shape := range []struct{ workers, credits int }{{1, 64}, {16, 4}, {64, 1}} {
		b.Run(fmt.Sprintf("workers=%d/credits=%d", shape.workers, shape.credits), func(b *testing.B) {
			r := newRigOn(b, strings.Replace(twoLanes, "shards: 2", "shards: 4", 1), time.Minute)
			now := time.Now()
			for s := range 4 {
				envs := make([]*envelope.Envelope, 0, b.N/4+1)
				for i := s; i < b.N; i += 4 {
					e := topotest.Envelope(fmt.Sprintf("t%d", i%10), fmt.Sprintf("job-%d", i), now)
					e.Lane = "std"
					envs = append(envs, e)
				}
				r.b.Enqueue(b, r.b.Topo.ShardQueue("std", s), envs...)
			}
			done := make(chan struct{})
			c := newCollector(func(worker.Job) error { return nil })
			c.onCount(b.N, func() { close(done) })
			b.ResetTimer()
			cpu := proccpu.Used()
			for range shape.workers {
				r.run(b, keyAll, c, worker.ConnectOptions{Concurrency: shape.credits, Lanes: []string{"std"}})
			}
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				b.Fatalf("%d of %d delivered in 5m", c.count(), b.N)
			}
			b.StopTimer()
			b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/job")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
