package metrics

import (
	"math"
	"testing"
	"time"
)

func TestDelivered(t *testing.T) {
	t.Parallel()
	m := New(nil, Options{})
	for range 3 {
		m.Drain("std", ActionDelivered, "")
	}
	m.Drain("std", ActionRetried, "attempts")
	m.Drain("bulk", ActionDelivered, "")
	tests := []struct {
		lane string
		want float64
	}{{"std", 3}, {"bulk", 1}, {"none", 0}}
	for _, tt := range tests {
		if got := m.Delivered(tt.lane); got != tt.want {
			t.Errorf("Delivered(%s) = %g, want %g", tt.lane, got, tt.want)
		}
	}
	if got := (*Metrics)(nil).Delivered("std"); got != 0 {
		t.Errorf("nil Metrics: %g", got)
	}
}

// TestDeliveryRate drives the meter with a counter and a clock: the rate
// is unknown until samples span five seconds, follows the window, is a
// known 0 when nothing was delivered in it, and after a stall is measured
// from the moment deliveries resumed.
func TestDeliveryRate(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	counts := map[string]float64{}
	r := NewDeliveryRate(func(lane string) float64 { return counts[lane] }, 30*time.Second)
	steps := []struct {
		at        time.Duration
		delivered float64 // running count at that time
		want      float64
		known     bool
	}{
		{0, 0, 0, false},
		{2 * time.Second, 200, 0, false},    // 2 s of samples: too short
		{5 * time.Second, 500, 100, true},   // 500 over 5 s
		{10 * time.Second, 1500, 150, true}, // 1500 over 10 s
		{30 * time.Second, 1500, 50, true},  // 1500 over 30 s
		{39 * time.Second, 1500, 0, true},   // the window holds samples from 10 s on: none delivered since
		{42 * time.Second, 1530, 0, false},  // resumed after the sample at 39 s: 3 s, too short
		{45 * time.Second, 1560, 10, true},  // 60 since the sample at 39 s, not 60 over the 15 s since 30 s
		{50 * time.Second, 1610, 10, true},  // 110 over 11 s
	}
	for _, s := range steps {
		counts["std"] = s.delivered
		got, known := r.Rate("std", start.Add(s.at))
		if known != s.known || math.Abs(got-s.want) > 1e-9 {
			t.Fatalf("at %s: rate %g (known %v), want %g (known %v)", s.at, got, known, s.want, s.known)
		}
	}
	if _, known := r.Rate("other", start.Add(time.Minute)); known {
		t.Fatal("a lane never sampled has a known rate")
	}
}
