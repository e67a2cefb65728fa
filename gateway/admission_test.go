package gateway

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func TestBucketsTake(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	// Burst of 2 at 1 token/s: two takes pass, the third waits 1 s.
	for i := range 2 {
		if undo, _ := b.Take("a", 1, 2, t0); undo == nil {
			t.Fatalf("take %d refused", i)
		}
	}
	undo, wait := b.Take("a", 1, 2, t0)
	if undo != nil || wait != time.Second {
		t.Fatalf("third take: undo=%v wait=%s, want refused with 1s", undo != nil, wait)
	}
	// Another tenant is unaffected.
	if undo, _ := b.Take("b", 1, 2, t0); undo == nil {
		t.Fatal("tenant b refused")
	}
	// Half a second later the wait is half a second.
	if _, wait := b.Take("a", 1, 2, t0.Add(500*time.Millisecond)); wait != 500*time.Millisecond {
		t.Fatalf("wait = %s, want 500ms", wait)
	}
	// After a second a token is back.
	if undo, _ := b.Take("a", 1, 2, t0.Add(time.Second)); undo == nil {
		t.Fatal("refilled token refused")
	}
}

func TestBucketsUndo(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	undo, _ := b.Take("a", 1, 1, t0)
	if undo == nil {
		t.Fatal("first take refused")
	}
	undo()
	if undo, _ := b.Take("a", 1, 1, t0); undo == nil {
		t.Fatal("token given back was not available again")
	}
}

func TestBucketsLimitChange(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	b.Take("a", 1, 1, t0)
	// Raising the rate to 10/s shortens the wait without resetting the bucket.
	if _, wait := b.Take("a", 10, 1, t0); wait != 100*time.Millisecond {
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
		if undo, _ := b.Take("a", 1, 5, t0); undo == nil {
			t.Fatalf("take %d after raising the burst refused", i)
		}
	}
	if undo, _ := b.Take("a", 1, 5, t0); undo != nil {
		t.Fatal("take beyond the new burst allowed")
	}
	// Lowering it to 1 leaves 5 tokens owed: the next one is 5 s away.
	if _, wait := b.Take("a", 1, 1, t0); wait != 5*time.Second {
		t.Fatalf("wait after lowering the burst = %s, want 5s", wait)
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
	if undo, _ := b.Take("refilled", 1, 1, t0.Add(time.Hour)); undo == nil {
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
	if undo, _ := b.Take("a", 1000, 1, t0.Add(10*time.Millisecond)); undo == nil {
		t.Fatal("first take refused")
	}
	// 1 token/ms: at +11ms one is back, whatever order the calls arrive in.
	if undo, wait := b.Take("a", 1000, 1, t0.Add(11*time.Millisecond)); undo == nil {
		t.Fatalf("take at +11ms refused (wait %s)", wait)
	}
	if _, wait := b.Take("a", 1000, 1, t0.Add(5*time.Millisecond)); wait != time.Millisecond {
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
	if undo, _ := b.Take("a", 1, 1, past); undo == nil {
		t.Fatal("first take refused")
	}
	if _, wait := b.Take("a", 1, 1, past.Add(500*time.Millisecond)); wait != 500*time.Millisecond {
		t.Fatalf("wait = %s, want 500ms", wait)
	}
	if undo, _ := b.Take("a", 1, 1, past.Add(time.Second)); undo == nil {
		t.Fatal("refilled token refused")
	}
}

// TestBucketsMatchRateLimiter drives a bucket and a rate.Limiter through the
// same sequence of takes, including rate changes, and wants the same
// answers.
func TestBucketsMatchRateLimiter(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	b := NewBuckets()
	limit, burst := rate.Limit(5), 3
	ref := rate.NewLimiter(limit, burst)
	now := t0
	for i := range 5000 {
		now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		if i%500 == 499 { // a reload changes the rate
			limit = rate.Limit(1 + rng.IntN(20))
			ref.SetLimitAt(now, limit)
		}
		undo, wait := b.Take("a", limit, burst, now)
		r := ref.ReserveN(now, 1)
		refWait := r.DelayFrom(now)
		if refWait > 0 {
			r.CancelAt(now)
		}
		if (undo != nil) != (refWait == 0) {
			t.Fatalf("take %d at +%s (limit %g burst %d): allowed=%v, rate.Limiter wait %s", i, now.Sub(t0), float64(limit), burst, undo != nil, refWait)
		}
		if undo == nil {
			if d := wait - refWait; d < -time.Millisecond || d > time.Millisecond {
				t.Fatalf("take %d: wait %s, rate.Limiter %s", i, wait, refWait)
			}
		}
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
				if undo, _ := b.Take("shared", 1, 50, t0); undo != nil {
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

func TestIdempotency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newIdempotency(time.Minute)
	owner1, owner2 := new(int), new(int)

	e, id, err := s.begin(ctx, "t", "k", owner1, t0)
	if err != nil || e == nil || id != "" {
		t.Fatalf("first begin = %v %q %v", e, id, err)
	}
	// A concurrent submit with the same key waits for the first.
	var wg sync.WaitGroup
	var gotID string
	wg.Go(func() {
		_, gotID, _ = s.begin(ctx, "t", "k", owner2, t0)
	})
	s.finish(e, "job-1", t0)
	wg.Wait()
	if gotID != "job-1" {
		t.Fatalf("waiter got %q, want job-1", gotID)
	}
	// Other tenants and keys are independent.
	if e, _, _ := s.begin(ctx, "u", "k", owner2, t0); e == nil {
		t.Fatal("other tenant blocked")
	}
	// After the window the key is free again.
	if e, _, _ := s.begin(ctx, "t", "k", owner2, t0.Add(2*time.Minute)); e == nil {
		t.Fatal("expired key still held")
	}
}

func TestIdempotencyFailedFirstFreesKey(t *testing.T) {
	t.Parallel()
	s := newIdempotency(time.Minute)
	e, _, _ := s.begin(context.Background(), "t", "k", 1, t0)
	s.finish(e, "", t0)
	if e2, id, _ := s.begin(context.Background(), "t", "k", 2, t0); e2 == nil || id != "" {
		t.Fatalf("after a failed first submit: entry=%v id=%q, want a fresh claim", e2, id)
	}
}

func TestIdempotencyWaitHonoursContext(t *testing.T) {
	t.Parallel()
	s := newIdempotency(time.Minute)
	_, _, _ = s.begin(context.Background(), "t", "k", 1, t0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.begin(ctx, "t", "k", 2, t0); err == nil {
		t.Fatal("waiting on a held key ignored cancellation")
	}
}
