package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LaneSeries records a lane's per-job figures (Dwell, AgeOfFirstAttempt,
// and the delivered drain action) as the Metrics methods of the same
// names do, into the same series, but finds each series once instead of
// by its label values on every job (hashing them and reading the vector's
// map under its lock: three lookups per job were about 3% of a gateway's
// CPU in a pull drain). Each series is made at its first use, as through
// Metrics, so that none appears earlier than it did. A nil *LaneSeries
// (from a nil *Metrics) records nothing.
type LaneSeries struct {
	dwell, ageOfFirstAttempt func() prometheus.Observer
	delivered                func() prometheus.Counter
}

// Lane returns lane's per-job series; nil if m is nil.
func (m *Metrics) Lane(lane string) *LaneSeries {
	if m == nil {
		return nil
	}
	return &LaneSeries{
		dwell: sync.OnceValue(func() prometheus.Observer {
			return m.dwell.WithLabelValues(m.lanes.value(lane))
		}),
		ageOfFirstAttempt: sync.OnceValue(func() prometheus.Observer {
			return m.ageOfFirstAttempt.WithLabelValues(m.lanes.value(lane))
		}),
		delivered: sync.OnceValue(func() prometheus.Counter {
			return m.drainActions.WithLabelValues(m.lanes.value(lane), ActionDelivered, m.reasons.value(""))
		}),
	}
}

// Dwell is Metrics.Dwell for the lane.
func (l *LaneSeries) Dwell(d time.Duration) {
	if l != nil {
		l.dwell().Observe(d.Seconds())
	}
}

// AgeOfFirstAttempt is Metrics.AgeOfFirstAttempt for the lane.
func (l *LaneSeries) AgeOfFirstAttempt(d time.Duration) {
	if l != nil {
		l.ageOfFirstAttempt().Observe(d.Seconds())
	}
}

// Delivered is Metrics.Drain(lane, ActionDelivered, "").
func (l *LaneSeries) Delivered() {
	if l != nil {
		l.delivered().Inc()
	}
}
