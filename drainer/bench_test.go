package drainer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/proccpu"
)

// countingHandler acknowledges every job at once.
type countingHandler struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (h *countingHandler) Handle(context.Context, *Job) error {
	if h.n.Add(1) == h.want {
		close(h.done)
	}
	return nil
}

// BenchmarkDrain reports jobs/s through a drainer to a handler that does
// nothing, from 4 preloaded shard queues on the embedded backend: the
// drainer's own cost per job (receive, decode, decide, deliver, ack).
//
//	go test -run '^$' -bench Drain -benchtime 5000x ./drainer/
func BenchmarkDrain(b *testing.B) {
	tb := setup(b, "lanes:\n  - {name: std, shards: 4}\n")
	now := time.Now()
	for s := range 4 {
		envs := make([]*envelope.Envelope, 0, b.N/4+1)
		for i := s; i < b.N; i += 4 {
			envs = append(envs, testEnvelope(fmt.Sprintf("t%d", i%50), fmt.Sprintf("job-%d", i), now))
		}
		tb.enqueue(b, tb.topo.ShardQueue("std", s), envs...)
	}
	h := &countingHandler{want: int64(b.N), done: make(chan struct{})}
	b.ResetTimer()
	cpu := proccpu.Used()
	startDrainer(b, Config{Backend: tb.backend, Topology: tb.topo, Handler: h})
	select {
	case <-h.done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d delivered in 5m", h.n.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/job")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
