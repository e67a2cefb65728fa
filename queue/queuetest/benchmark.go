package queuetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// Benchmark measures a backend: durable single-message sends at
// concurrency 1 and 64 (1 KiB payloads; group commit shows as the ratio),
// batch sends of 10, and receive+delete in batches of 10. Each reports
// jobs/s.
func Benchmark(b *testing.B, newBackend func(b *testing.B) queue.Backend) {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte(i * 31)
	}
	ctx := context.Background()
	setupQueue := func(b *testing.B) (queue.Backend, string) {
		be := newBackend(b)
		b.Cleanup(func() { _ = be.Close() })
		name := fmt.Sprintf("bench-%d", time.Now().UnixNano())
		if err := be.EnsureQueues(ctx, []queue.QueueSpec{{Name: name, VisibilityTimeout: time.Minute}}); err != nil {
			b.Fatal(err)
		}
		return be, name
	}
	send := func(b *testing.B, be queue.Backend, q string, n int) {
		entries := make([]queue.SendEntry, n)
		for i := range entries {
			entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: payload}
		}
		res, err := be.Send(ctx, &queue.SendParams{Queue: q, Entries: entries})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("send/1KiB/concurrency=%d", conc), func(b *testing.B) {
			be, q := setupQueue(b)
			start := time.Now()
			var wg sync.WaitGroup
			work := make(chan struct{}, b.N)
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			b.ResetTimer()
			for range conc {
				wg.Go(func() {
					for range work {
						send(b, be, q, 1)
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
	}
	b.Run("send/1KiB/batch=10", func(b *testing.B) {
		be, q := setupQueue(b)
		start := time.Now()
		for b.Loop() {
			send(b, be, q, queue.MaxBatch)
		}
		b.ReportMetric(float64(b.N*queue.MaxBatch)/time.Since(start).Seconds(), "jobs/s")
	})
	b.Run("receive+delete/batch=10", func(b *testing.B) {
		be, q := setupQueue(b)
		for range b.N {
			send(b, be, q, queue.MaxBatch)
		}
		b.ResetTimer()
		start := time.Now()
		got := 0
		for range b.N {
			msgs, err := be.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: queue.MaxBatch})
			if err != nil {
				b.Fatal(err)
			}
			handles := make([]string, len(msgs))
			for i, m := range msgs {
				handles[i] = m.ReceiptHandle
			}
			if len(handles) > 0 {
				if _, err := be.Delete(ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: handles}); err != nil {
					b.Fatal(err)
				}
			}
			got += len(msgs)
		}
		b.ReportMetric(float64(got)/time.Since(start).Seconds(), "jobs/s")
	})
}
