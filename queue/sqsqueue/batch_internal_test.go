package sqsqueue

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// goroutineID is the calling goroutine's number, read from its stack
// header ("goroutine 42 [running]:").
func goroutineID() int {
	var buf [64]byte
	header := buf[:runtime.Stack(buf[:], false)]
	header = bytes.TrimPrefix(header, []byte("goroutine "))
	id, _ := strconv.Atoi(string(header[:bytes.IndexByte(header, ' ')]))
	return id
}

// testBatcher returns a batcher of ints, with no linger, whose batches
// flush calls; the backend it belongs to closes at the test's end.
func testBatcher(t *testing.T, flush func(entries []int)) (*Backend, *batcher[int]) {
	t.Helper()
	b := &Backend{batchers: map[batcherKey]flusher{}}
	b.closeCtx, b.closeCancel = context.WithCancel(context.Background())
	bt := batcherFor(b, opDeleteMessageBatch, "q", "url", func() *batcher[int] {
		return &batcher[int]{linger: -1, flush: func(_ *batcher[int], entries []int) { flush(entries) }}
	})
	t.Cleanup(func() {
		b.closeCancel()
		b.inflight.Wait()
	})
	return b, bt
}

// TestBatcherReusesFlushers: batches sent one after another go to the
// flusher goroutine that sent the last one, not a goroutine each (whose
// stack grew anew to the SDK's depth every time).
func TestBatcherReusesFlushers(t *testing.T) {
	var mu sync.Mutex
	ids := map[int]int{}
	b, bt := testBatcher(t, func([]int) {
		mu.Lock()
		ids[goroutineID()]++
		mu.Unlock()
	})
	const batches = 50
	for i := range batches {
		bt.add(make([]int, queue.MaxBatch))
		b.inflight.Wait()
		if i%10 == 9 {
			// Give the flusher time to wait for the next batch again:
			// a batch flushed before it does goes to a new goroutine.
			time.Sleep(10 * time.Millisecond)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) > batches/5 {
		t.Errorf("%d batches flushed by %d goroutines, want at most %d: flushers are not reused", batches, len(ids), batches/5)
	}
}

// TestBatcherFlushesConcurrently: a batch that fills while another's call
// is under way goes out at once, on another goroutine.
func TestBatcherFlushesConcurrently(t *testing.T) {
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	b, bt := testBatcher(t, func([]int) {
		started <- struct{}{}
		<-release
	})
	bt.add(make([]int, queue.MaxBatch))
	bt.add(make([]int, queue.MaxBatch))
	for range 2 {
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("the second batch waited for the first one's call")
		}
	}
	close(release)
	b.inflight.Wait()
}

// TestBatcherFlushersEndAtClose: an idle flusher ends when its backend
// closes, not a linger later (goleak in TestMain checks the rest).
func TestBatcherFlushersEndAtClose(t *testing.T) {
	b, bt := testBatcher(t, func([]int) {})
	before := runtime.NumGoroutine()
	bt.add(make([]int, queue.MaxBatch))
	b.inflight.Wait()
	b.closeCancel()
	deadline := time.Now().Add(flusherIdle / 2)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after close, %d before the flush: the flusher outlived its backend", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}
