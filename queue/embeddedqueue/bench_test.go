package embeddedqueue

import (
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/queuetest"
)

// BenchmarkEmbedded runs the shared backend benchmarks on a store in a
// temporary directory, in each durability mode. Figures are in
// queuetest.Benchmark and doc.go.
func BenchmarkEmbedded(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			queuetest.Benchmark(b, func(b *testing.B) queue.Backend {
				opts := m.opts
				opts.Logger = quiet
				be, err := Open(filepath.Join(b.TempDir(), "queues.db"), opts)
				if err != nil {
					b.Fatal(err)
				}
				return be
			})
		})
	}
}

// latencyRate is the open loop's offered load in BenchmarkEmbeddedSendLatency:
// the enqueue goal (item 7: 40,000 durable 1 KiB jobs/s), offered one
// job per Send.
const latencyRate = 40_000

// BenchmarkEmbeddedSendLatency is the enqueue figure's companion: the
// latency of single-job 1 KiB Sends offered in an open loop at
// latencyRate (8 paced streams, each send on its own goroutine, so a slow
// answer delays no later send), in each durability mode. Latency is from
// a send's call to its answer (the pacer's own sleep is not counted); the
// p50, p99 and p99.9 are over b.N sends, and sent/s is the load the pacer
// achieved.
//
//	go test -run '^$' -bench EmbeddedSendLatency -benchtime 80000x ./queue/embeddedqueue/
func BenchmarkEmbeddedSendLatency(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			opts := m.opts
			opts.Logger = quiet
			be, err := Open(filepath.Join(b.TempDir(), "queues.db"), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			spec := queue.QueueSpec{Name: "latency", VisibilityTimeout: time.Minute, Retention: time.Hour}
			if err := be.EnsureQueues(b.Context(), []queue.QueueSpec{spec}); err != nil {
				b.Fatal(err)
			}
			lat := openLoopSends(b, be, spec.Name, latencyRate, b.N)
			b.StopTimer()
			slices.Sort(lat)
			at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
			b.ReportMetric(at(0.50), "p50-µs")
			b.ReportMetric(at(0.99), "p99-µs")
			b.ReportMetric(at(0.999), "p99.9-µs")
			b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "sent/s")
		})
	}
}

// openLoopSends sends n single-job 1 KiB messages to q at rate per second
// from 8 paced streams and returns each send's latency. A stream that
// oversleeps sends what it owes at once, as real arrivals bunch up.
func openLoopSends(b *testing.B, be *Backend, q string, rate, n int) []time.Duration {
	const streams = 8
	body := make([]byte, 1024)
	lat := make([]time.Duration, n)
	every := time.Second * streams / time.Duration(rate)
	start := time.Now()
	var sends sync.WaitGroup
	var pacers sync.WaitGroup
	var failed atomic.Pointer[error]
	for s := range streams {
		pacers.Go(func() {
			for i := s; i < n; i += streams {
				time.Sleep(time.Until(start.Add(time.Duration(i/streams)*every + time.Duration(s)*every/streams)))
				sends.Go(func() {
					t0 := time.Now()
					res, err := be.Send(b.Context(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "0", Body: body}}})
					if err == nil {
						err = res[0].Err
					}
					if err != nil {
						failed.CompareAndSwap(nil, &err)
					}
					lat[i] = time.Since(t0)
				})
			}
		})
	}
	pacers.Wait()
	sends.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return lat
}
