package queuetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// Benchmark measures a backend, one b.Run per operation, each reporting
// jobs/s (messages per second of measured time):
//
//   - send/1KiB/concurrency=1, =64 and =256: durable single-message Sends
//     of 1 KiB bodies from 1, 64 and 256 goroutines; a backend with group
//     commit shows it as the ratio between them.
//   - send/1KiB/batch=10: one goroutine sending batches of 10.
//   - receive+delete/batch=10/consumers=1, =8 and =32: receive up to 10,
//     delete them in one call, from a preloaded queue.
//
// Sample, embedded backend, 2 cores shared with other work, -benchtime 2s
// (go test -run '^$' -bench BenchmarkEmbedded -benchtime 2s
// ./queue/embeddedqueue/, 2026-11-23):
//
//	send/1KiB/concurrency=1                        1,228 jobs/s
//	send/1KiB/concurrency=64                      33,325 jobs/s
//	send/1KiB/concurrency=256                     70,556 jobs/s
//	send/1KiB/batch=10                            12,120 jobs/s
//	receive+delete/batch=10/consumers=1            9,254 jobs/s
//	receive+delete/batch=10/consumers=8           26,350 jobs/s
//	receive+delete/batch=10/consumers=32          46,488 jobs/s
func Benchmark(b *testing.B, newBackend func(b *testing.B) queue.Backend) {
	payload := make([]byte, 1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	ctx := context.Background()
	var queues atomic.Int64
	setupQueue := func(b *testing.B) (queue.Backend, string) {
		b.Helper()
		be := newBackend(b)
		b.Cleanup(func() { _ = be.Close() })
		name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano()%1e9, queues.Add(1))
		if err := be.EnsureQueues(ctx, []queue.QueueSpec{{Name: name, VisibilityTimeout: time.Minute}}); err != nil {
			b.Fatal(err)
		}
		return be, name
	}
	send := func(be queue.Backend, q string, n int) error {
		entries := make([]queue.SendEntry, n)
		for i := range entries {
			entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: payload}
		}
		res, err := be.Send(ctx, &queue.SendParams{Queue: q, Entries: entries})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	}
	report := func(b *testing.B, jobs int) {
		b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
	}

	for _, conc := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("send/1KiB/concurrency=%d", conc), func(b *testing.B) {
			be, q := setupQueue(b)
			b.ResetTimer()
			if err := spread(conc, b.N, func() error { return send(be, q, 1) }); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			report(b, b.N)
		})
	}

	b.Run("send/1KiB/batch=10", func(b *testing.B) {
		be, q := setupQueue(b)
		for b.Loop() {
			if err := send(be, q, queue.MaxBatch); err != nil {
				b.Fatal(err)
			}
		}
		report(b, b.N*queue.MaxBatch)
	})

	for _, consumers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("receive+delete/batch=10/consumers=%d", consumers), func(b *testing.B) {
			be, q := setupQueue(b)
			if err := spread(64, b.N, func() error { return send(be, q, queue.MaxBatch) }); err != nil {
				b.Fatal(err)
			}
			want := int64(b.N * queue.MaxBatch)
			var got, progress atomic.Int64
			progress.Store(time.Now().UnixNano())
			b.ResetTimer()
			err := spreadUntil(consumers, func() (bool, error) {
				if got.Load() >= want {
					return false, nil
				}
				// No long poll: a consumer waiting on a drained queue
				// would add its wait to the measured time.
				msgs, err := be.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: queue.MaxBatch})
				if err != nil {
					return false, err
				}
				if len(msgs) == 0 {
					// The rest are leased by other consumers, or a short
					// poll missed them (SQS).
					if time.Since(time.Unix(0, progress.Load())) > 30*time.Second {
						return false, fmt.Errorf("no message for 30s with %d of %d received", got.Load(), want)
					}
					time.Sleep(time.Millisecond)
					return true, nil
				}
				progress.Store(time.Now().UnixNano())
				handles := make([]string, len(msgs))
				for i, m := range msgs {
					handles[i] = m.ReceiptHandle
				}
				res, err := be.Delete(ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: handles})
				if err != nil {
					return false, err
				}
				for _, err := range res {
					if err != nil {
						return false, err
					}
				}
				return got.Add(int64(len(msgs))) < want, nil
			})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if got.Load() < want {
				b.Fatalf("received %d of %d messages", got.Load(), want)
			}
			report(b, int(got.Load()))
		})
	}
}

// spread runs n calls of f on conc goroutines and returns the first error.
func spread(conc, n int, f func() error) error {
	var left atomic.Int64
	left.Store(int64(n))
	return spreadUntil(conc, func() (bool, error) {
		if left.Add(-1) < 0 {
			return false, nil
		}
		return true, f()
	})
}

// spreadUntil calls f on conc goroutines until it returns false or an
// error, and returns the first error.
func spreadUntil(conc int, f func() (bool, error)) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		stop  atomic.Bool
	)
	for range conc {
		wg.Go(func() {
			for !stop.Load() {
				more, err := f()
				if err != nil {
					once.Do(func() { first = err })
					stop.Store(true)
				}
				if !more {
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
