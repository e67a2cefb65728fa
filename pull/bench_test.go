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
// batches of at most its credits. The jobs belong to 10 tenants, and in
// one more case to 5,000, with one worker of 64 credits: the cost of many
// tenants with work at once, the drainer's scheduler holding jobs of a
// thousand of them in its read-ahead.
//
//	go test -run '^$' -bench PullDrain -benchtime 20000x ./pull/
func BenchmarkPullDrain(b *testing.B) {
	for _, shape := range []struct{ workers, credits, tenants int }{{1, 64, 10}, {16, 4, 10}, {64, 1, 10}, {1, 64, 5000}} {
		name := fmt.Sprintf("workers=%d/credits=%d", shape.workers, shape.credits)
		if shape.tenants != 10 {
			name += fmt.Sprintf("/tenants=%d", shape.tenants)
		}
		b.Run(name, func(b *testing.B) {
			r := newRigOn(b, strings.Replace(twoLanes, "shards: 2", "shards: 4", 1), time.Minute)
			now := time.Now()
			for s := range 4 {
				envs := make([]*envelope.Envelope, 0, b.N/4+1)
				for i := s; i < b.N; i += 4 {
					e := topotest.Envelope(fmt.Sprintf("t%d", i%shape.tenants), fmt.Sprintf("job-%d", i), now)
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
