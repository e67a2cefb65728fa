package metricstest_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/metricstest"
)

func TestCounterSum(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg, metrics.Options{})
	m.Drain("std", metrics.ActionMoveFailed, "")
	m.Drain("std", metrics.ActionMoveFailed, "")
	m.Drain("bulk", metrics.ActionMoveFailed, "")
	m.Drain("std", metrics.ActionDelivered, "")
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"every series", metrics.NameDrainActions, nil, 4},
		{"one label", metrics.NameDrainActions, map[string]string{"action": metrics.ActionMoveFailed}, 3},
		{"two labels", metrics.NameDrainActions, map[string]string{"action": metrics.ActionMoveFailed, "lane": "std"}, 2},
		{"no such value", metrics.NameDrainActions, map[string]string{"action": metrics.ActionDropped}, 0},
		{"no such label", metrics.NameDrainActions, map[string]string{"colour": "red"}, 0},
		{"no such metric", "sluice_nothing_total", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := metricstest.CounterSum(t, reg, tt.metric, tt.labels); got != tt.want {
				t.Fatalf("CounterSum = %g, want %g", got, tt.want)
			}
		})
	}
}
