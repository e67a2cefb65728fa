package gateway

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestBucketsExtremeLimits: a tenant's rate and burst are any positive
// numbers the tenant file takes. However small the rate or large the
// burst, a bucket admits at once its burst (up to what maxBucketSpan
// holds, 36 years of tokens), and past it refuses with a positive wait.
// One token's time or a full bucket's used to overflow int64: a rate
// below about 1e-10/s (one job per 317 years, a way to shut a tenant off)
// came out as one token per nanosecond, no limit at all, and a slow rate
// with a large burst could refuse every job.
func TestBucketsExtremeLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		limit rate.Limit
		burst int
		want  int // takes admitted at once, of the first 1000
	}{
		{"ordinary", 10, 5, 5},
		{"one per 1000 s", 0.001, 3, 3},
		{"one per 317 years", 1e-10, 1, 1},
		{"tiniest", 1e-300, 2, 2},
		{"slow with a large burst", 1e-3, 1 << 30, 1000},
		{"slow with the largest burst", 1e-9, 1<<31 - 1, 4}, // a token per 9 years (maxTokenInterval): 36 years hold 4
		{"fast with the largest burst", 1e6, 1<<31 - 1, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := NewBuckets()
			admitted := 0
			for i := range 1000 {
				_, wait, ok := b.Take("a", tt.limit, tt.burst, t0)
				if !ok {
					if wait <= 0 {
						t.Fatalf("take %d refused with a wait of %s", i+1, wait)
					}
					break
				}
				admitted++
			}
			if admitted != tt.want {
				t.Fatalf("%d takes admitted at once, want %d", admitted, tt.want)
			}
			if admitted == 1000 {
				return
			}
			for i := range 3 {
				if _, wait, ok := b.Take("a", tt.limit, tt.burst, t0.Add(time.Duration(i)*time.Millisecond)); ok || wait <= 0 {
					t.Fatalf("take %d past the burst: ok=%v wait=%s, want refused with a positive wait", i+1, ok, wait)
				}
			}
		})
	}
}
