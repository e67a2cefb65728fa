package gateway

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func TestBucketsTake(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	// Burst of 2 at 1 token/s: two takes pass, the third is promised the
	// token due in 1 s.
	for i := range 2 {
		if _, _, ok := b.Take("a", 1, 2, t0); !ok {
			t.Fatalf("take %d refused", i)
		}
	}
	if _, wait, ok := b.Take("a", 1, 2, t0); ok || wait != time.Second {
		t.Fatalf("third take: ok=%v wait=%s, want refused with 1s", ok, wait)
	}
	// Another tenant is unaffected.
	if _, _, ok := b.Take("b", 1, 2, t0); !ok {
		t.Fatal("tenant b refused")
	}
	// Half a second later the next token is promised: due at +2s.
	if _, wait, _ := b.Take("a", 1, 2, t0.Add(500*time.Millisecond)); wait != 1500*time.Millisecond {
		t.Fatalf("wait = %s, want 1.5s", wait)
	}
	// At +1s the first promise is redeemed, at +2s the second.
	for _, at := range []time.Duration{time.Second, 2 * time.Second} {
		if _, wait, ok := b.Take("a", 1, 2, t0.Add(at)); !ok {
			t.Fatalf("promised token at +%s refused (wait %s)", at, wait)
		}
	}
}

func TestBucketsUndo(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	tok, _, ok := b.Take("a", 1, 1, t0)
	if !ok {
		t.Fatal("first take refused")
	}
	tok.Return(t0)
	if _, _, ok := b.Take("a", 1, 1, t0); !ok {
		t.Fatal("token given back was not available again")
	}
}

func TestBucketsLimitChange(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	b.Take("a", 1, 1, t0)
	// Raising the rate to 10/s shortens the wait without resetting the bucket.
	if _, wait, _ := b.Take("a", 10, 1, t0); wait != 100*time.Millisecond {
		t.Fatalf("wait = %s, want 100ms", wait)
	}
}

func TestBucketsBurstChange(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	for range 2 {
		b.Take("a", 1, 2, t0)
	}
	// Raising the burst to 5 gives the 3 extra tokens at once.
	for i := range 3 {
		if _, _, ok := b.Take("a", 1, 5, t0); !ok {
			t.Fatalf("take %d after raising the burst refused", i)
		}
	}
	// Beyond the new burst: refused, and the token due in 1 s reserved.
	if _, _, ok := b.Take("a", 1, 5, t0); ok {
		t.Fatal("take beyond the new burst allowed")
	}
	// Lowering it to 1 leaves 6 tokens owed (the promise lapses with the
	// old burst, its token stays taken): the next one is 6 s away.
	if _, wait, _ := b.Take("a", 1, 1, t0); wait != 6*time.Second {
		t.Fatalf("wait after lowering the burst = %s, want 6s", wait)
	}
}

func TestBucketsSweep(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	// Times only move forward, as they do for a real gateway.
	b.Take("refilled", 1, 1, t0)
	for range 3 {
		b.Take("busy", 1, 3, t0.Add(time.Hour))
	}
	b.Take("empty", 1, 1, t0.Add(time.Hour))
	if n := b.Sweep(t0.Add(time.Hour)); n != 2 {
		t.Fatalf("%d buckets remain, want 2", n)
	}
	// An evicted bucket comes back full.
	if _, _, ok := b.Take("refilled", 1, 1, t0.Add(time.Hour)); !ok {
		t.Fatal("evicted tenant refused")
	}
	// A bucket is kept until it is full again: busy, burst 3 at 1/s,
	// emptied at +1h, is full at +1h3s.
	if n := b.Sweep(t0.Add(time.Hour + 2*time.Second)); n != 1 {
		t.Fatalf("%d buckets remain 2s after emptying, want 1 (busy)", n)
	}
	if n := b.Sweep(t0.Add(time.Hour + 3*time.Second)); n != 0 {
		t.Fatalf("%d buckets remain once all are full, want 0", n)
	}
}

// TestBucketsTimeOrder: a call whose time is earlier than one the shard
// already used (requests reach the lock out of order) counts as happening
// at the later time, not as a burst.
func TestBucketsTimeOrder(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	if _, _, ok := b.Take("a", 1000, 1, t0.Add(10*time.Millisecond)); !ok {
		t.Fatal("first take refused")
	}
	// 1 token/ms: at +11ms one is back, whatever order the calls arrive in.
	if _, wait, ok := b.Take("a", 1000, 1, t0.Add(11*time.Millisecond)); !ok {
		t.Fatalf("take at +11ms refused (wait %s)", wait)
	}
	if _, wait, _ := b.Take("a", 1000, 1, t0.Add(5*time.Millisecond)); wait != time.Millisecond {
		t.Fatalf("late call: wait %s, want 1ms (the bucket as at +11ms)", wait)
	}
}

// TestBucketsBeforeEpoch: times earlier than the moment the buckets were
// made (a caller's clock reading taken just before, or a test's fixed time)
// are counted as they are, not clamped to the epoch.
func TestBucketsBeforeEpoch(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	past := time.Now().Add(-time.Hour)
	if _, _, ok := b.Take("a", 1, 1, past); !ok {
		t.Fatal("first take refused")
	}
	if _, wait, _ := b.Take("a", 1, 1, past.Add(500*time.Millisecond)); wait != 500*time.Millisecond {
		t.Fatalf("wait = %s, want 500ms", wait)
	}
	if _, _, ok := b.Take("a", 1, 1, past.Add(time.Second)); !ok {
		t.Fatal("refilled token refused")
	}
}

func TestBucketsConcurrent(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Go(func() {
			n := 0
			for range 100 {
				if _, _, ok := b.Take("shared", 1, 50, t0); ok {
					n++
				}
			}
			mu.Lock()
			allowed += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if allowed != 50 {
		t.Fatalf("%d takes allowed from a burst of 50", allowed)
	}
}

func TestHWMVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		backlog   int64
		fraction  float64
		wantRefus bool
		wantRetry time.Duration
	}{
		{"empty lane", 0, 0.5, false, 0},
		{"free just under half", 499, 0.5, false, 0},
		{"free at half", 500, 0.5, true, time.Second},
		{"standard under 80%", 799, 0.8, false, 0},
		{"standard at 80%", 800, 0.8, true, time.Second},
		{"premium under full", 999, 1.0, false, 0},
		{"premium at full", 1000, 1.0, true, time.Second},
		{"free far over: backlog over drain rate", 5500, 0.5, true, 50*time.Second + 10*time.Millisecond},
		{"capped at five minutes", 1_000_000, 0.5, true, 5 * time.Minute},
		// 1e10 s: past int64 nanoseconds, which came out as 1 s.
		{"capped past int64 nanoseconds", 1_000_000_000_000, 0.5, true, 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// HWM 1000 jobs, lane drains 100 jobs/s.
			refused, retry := hwmVerdict(tt.backlog, 1000, tt.fraction, 100)
			if refused != tt.wantRefus || retry != tt.wantRetry {
				t.Fatalf("got (%v, %s), want (%v, %s)", refused, retry, tt.wantRefus, tt.wantRetry)
			}
		})
	}
}

// TestHWMVerdictAtTheShare: a backlog that is exactly the tier's share of
// the mark is refused, also where fraction × mark comes out a hair above
// that share in floating point (0.07 × 100 is 7.000000000000001), which
// admitted a job at the share.
func TestHWMVerdictAtTheShare(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		fraction float64
		hwm      int64
	}{
		{0.07, 100}, {0.14, 100}, {0.28, 100}, {0.55, 100}, {0.07, 5000}, {0.17, 300_000}, {0.5, 1000}, {0.8, 1000}, {1, 7},
	} {
		share := int64(math.Round(tt.fraction * float64(tt.hwm)))
		if refused, _ := hwmVerdict(share-1, tt.hwm, tt.fraction, 100); refused {
			t.Errorf("%g of %d: backlog %d refused, want admitted", tt.fraction, tt.hwm, share-1)
		}
		if refused, _ := hwmVerdict(share, tt.hwm, tt.fraction, 100); !refused {
			t.Errorf("%g of %d: backlog %d admitted, want refused", tt.fraction, tt.hwm, share)
		}
	}
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newIdempotency(time.Minute, nil)

	e, id, err := s.begin(ctx, "t", "k", t0)
	if err != nil || e == nil || id != "" {
		t.Fatalf("first begin = %v %q %v", e, id, err)
	}
	// A concurrent submit with the same key waits for the first.
	var wg sync.WaitGroup
	var gotID string
	wg.Go(func() {
		_, gotID, _ = s.begin(ctx, "t", "k", t0)
	})
	s.finish(e, "job-1", t0)
	wg.Wait()
	if gotID != "job-1" {
		t.Fatalf("waiter got %q, want job-1", gotID)
	}
	// Other tenants and keys are independent.
	if e, _, _ := s.begin(ctx, "u", "k", t0); e == nil {
		t.Fatal("other tenant blocked")
	}
	// After the window the key is free again.
	if e, _, _ := s.begin(ctx, "t", "k", t0.Add(2*time.Minute)); e == nil {
		t.Fatal("expired key still held")
	}
}

func TestIdempotencyFailedFirstFreesKey(t *testing.T) {
	t.Parallel()
	s := newIdempotency(time.Minute, nil)
	e, _, _ := s.begin(context.Background(), "t", "k", t0)
	s.finish(e, "", t0)
	if e2, id, _ := s.begin(context.Background(), "t", "k", t0); e2 == nil || id != "" {
		t.Fatalf("after a failed first submit: entry=%v id=%q, want a fresh claim", e2, id)
	}
}

func TestIdempotencyWaitHonoursContext(t *testing.T) {
	t.Parallel()
	s := newIdempotency(time.Minute, nil)
	_, _, _ = s.begin(context.Background(), "t", "k", t0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.begin(ctx, "t", "k", t0); err == nil {
		t.Fatal("waiting on a held key ignored cancellation")
	}
}
