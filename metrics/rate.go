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
// window, and whether a rate is known. The rate is measured from the last
// sample before the deliveries in the window began, so a lane whose
// drainers come back after a stall is measured over the time they have
// delivered, not averaged with the stall (at 10 jobs/s after one, a
// backlog's retry hint read 10 s for two jobs too many; found in a
// walkthrough). That span must be at least five seconds: until then the
// rate is unknown, and callers fall back to the declared capacity. A lane
// whose samples span five seconds with nothing delivered has a known rate
// of 0: its drainers deliver nothing, for want of workers or of due jobs.
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
	if n <= s[0].n {
		return 0, now.Sub(s[0].at) >= rateMinSpan
	}
	from := s[0]
	for _, x := range s[1:] {
		if x.n > from.n {
			break
		}
		from = x
	}
	span := now.Sub(from.at)
	if span < rateMinSpan {
		return 0, false
	}
	return (n - from.n) / span.Seconds(), true
}
