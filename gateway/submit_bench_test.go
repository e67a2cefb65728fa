package gateway

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/proccpu"
	"github.com/sluice-dev/sluice/topology"
)

// The submit benchmarks measure calls through a real gRPC server on
// loopback and the whole admission path (auth, validation, bucket, router,
// envelope, durable enqueue on the embedded backend), from parallel
// callers; allocations are the client's and the server's together:
//
//	go test -run '^$' -bench Submit -benchmem -cpu 2 ./gateway/

// BenchmarkSubmit: unary Submits from 64 callers.
func BenchmarkSubmit(b *testing.B) {
	tb := setup(b)
	ctx := key(b.Context(), "bench-key-1")
	payload := make([]byte, 200)
	b.ReportAllocs()
	b.SetParallelism(32) // 64 callers with -cpu 2: group commit needs company
	b.ResetTimer()
	cpu := proccpu.Used()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: payload}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
}

// BenchmarkSubmitBatch: SubmitBatch calls of 100 jobs from 8 callers,
// without idempotency keys and with a fresh key per job (as the client
// sends); one op is one job. The calls' median and p99 latency are the
// throughput's companions.
func BenchmarkSubmitBatch(b *testing.B) {
	for _, keys := range []bool{false, true} {
		b.Run(fmt.Sprintf("keys=%v", keys), func(b *testing.B) { benchmarkSubmitBatch(b, keys) })
	}
}

// BenchmarkSubmitBatchRefused: SubmitBatch calls of 100 jobs from 8
// callers for a tenant over its submit rate, every job refused with a
// RetryInfo: what an overloaded gateway spends on each job it turns away.
func BenchmarkSubmitBatchRefused(b *testing.B) {
	benchmarkSubmitBatchAs(b, "tiny-key-1", false, true)
}

func benchmarkSubmitBatch(b *testing.B, keys bool) {
	benchmarkSubmitBatchAs(b, "bench-key-1", keys, false)
}

// benchmarkSubmitBatchAs fails on a refused job unless refused (every job
// is expected to be).
func benchmarkSubmitBatchAs(b *testing.B, apiKey string, keys, refused bool) {
	const size = 100
	// No lane fills up: past its high-water mark every job would be
	// refused, and at -benchtime 1s on a fast machine b.N passes the
	// default topology's 300,000 jobs.
	topo := topology.Default()
	for i := range topo.Lanes {
		topo.Lanes[i].HighWaterMark = 1 << 40
	}
	tb := setupWith(b, Config{Topology: topo})
	ctx := key(b.Context(), apiKey)
	payload := make([]byte, 200)
	var seq atomic.Int64
	var mu sync.Mutex
	var calls []time.Duration // each call's latency
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	cpu := proccpu.Used()
	b.RunParallel(func(pb *testing.PB) {
		jobs := make([]*ingestv1.SubmitRequest, 0, size)
		var mine []time.Duration
		defer func() {
			mu.Lock()
			calls = append(calls, mine...)
			mu.Unlock()
		}()
		for {
			jobs = jobs[:0]
			for len(jobs) < size && pb.Next() {
				job := &ingestv1.SubmitRequest{Payload: payload}
				if keys {
					job.IdempotencyKey = strconv.FormatInt(seq.Add(1), 36)
				}
				jobs = append(jobs, job)
			}
			if len(jobs) == 0 {
				return
			}
			start := time.Now()
			resp, err := tb.client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: jobs})
			if err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(start))
			if !refused {
				if e := firstJobError(resp); e != nil {
					// A refused job would make the figures measure
					// refusals, not admissions.
					b.Errorf("job refused: code %d: %s", e.GetCode(), e.GetMessage())
					return
				}
			}
		}
	})
	b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	if len(calls) > 0 {
		slices.Sort(calls)
		b.ReportMetric(float64(calls[len(calls)/2].Microseconds())/1000, "p50-ms/call")
		b.ReportMetric(float64(calls[(len(calls)-1)*99/100].Microseconds())/1000, "p99-ms/call")
	}
}

// firstJobError is the error of resp's first refused job, or nil.
func firstJobError(resp *ingestv1.SubmitBatchResponse) *ingestv1.JobError {
	for _, r := range resp.GetResults() {
		if e := r.GetError(); e != nil {
			return e
		}
	}
	return nil
}
