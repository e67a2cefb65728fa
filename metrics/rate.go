package metrics

import (
	"cmp"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Delivered returns the jobs delivered (acked) in lane so far, as Drain
// counted them in this process; 0 for a nil Metrics.
func (m *Metrics) Delivered(lane string) float64 {
	if m == nil {
		return 0
	}
	var pb dto.Metric
	if err := m.drainActions.WithLabelValues(m.lanes.value(lane), ActionDelivered, "").Write(&pb); err != nil {
		return 0
	}
	return pb.GetCounter().GetValue()
}

// RateWindowDefault is DeliveryRate's window when NewDeliveryRate is given
// zero.
const RateWindowDefault = 30 * time.Second

// rateMinSpan is the least span of samples a rate is computed over.
const rateMinSpan = 5 * time.Second

// DeliveryRate measures each lane's delivered jobs per second from a
// running count (Metrics.Delivered of the process's drainers), over a
// sliding window. It samples the count when asked, at most once a second
// per lane, so it costs nothing while no one asks.
type DeliveryRate struct {
	count  func(lane string) float64
	window time.Duration

	mu    sync.Mutex
	lanes map[string][]rateSample
}

type rateSample struct {
	at time.Time
	n  float64
}

// NewDeliveryRate returns a meter over count; window defaults to
// RateWindowDefault.
func NewDeliveryRate(count func(lane string) float64, window time.Duration) *DeliveryRate {
	return &DeliveryRate{count: count, window: cmp.Or(window, RateWindowDefault), lanes: map[string][]rateSample{}}
}

// Rate returns lane's deliveries per second over the samples of the last
// window, and whether a rate is known: that needs samples spanning at
// least five seconds and some deliveries between them. A lane whose
// drainers delivered nothing has no known rate: its callers fall back to
// the declared capacity.
func (r *DeliveryRate) Rate(lane string, now time.Time) (float64, bool) {
	n := r.count(lane)
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.lanes[lane]
	old := 0
	for old < len(s) && now.Sub(s[old].at) > r.window {
		old++
	}
	s = s[old:]
	if len(s) == 0 || now.Sub(s[len(s)-1].at) >= time.Second {
		s = append(s, rateSample{at: now, n: n})
	}
	r.lanes[lane] = s
	span := now.Sub(s[0].at)
	if span < rateMinSpan || n <= s[0].n {
		return 0, false
	}
	return (n - s[0].n) / span.Seconds(), true
}
