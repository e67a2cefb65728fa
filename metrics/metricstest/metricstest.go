// Package metricstest reads figures back from a Prometheus registry, for
// tests that check what sluice's metrics recorded.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterSum gathers g and returns the sum of the named counter's series
// whose labels include every name and value in labels (all series when
// labels is empty); 0 when there is none. A gather error fails t.
func CounterSum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			matched := 0
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
					matched++
				}
			}
			if matched == len(labels) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
