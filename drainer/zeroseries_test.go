package drainer

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/metrics"
)

// TestDrainSeriesStartAtZero: once started, a drainer's lanes have the
// series of the actions an operator alerts on at 0 (dead letters by
// reason among them), so that the first dead letter is an increase an
// alert sees.
func TestDrainSeriesStartAtZero(t *testing.T) {
	t.Parallel()
	tb := setup(t, moveLane)
	reg := prometheus.NewPedanticRegistry()
	startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: newRecorder(), Metrics: metrics.New(reg, metrics.Options{})})
	n, err := testutil.GatherAndCount(reg, metrics.NameDrainActions)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(countedActions) {
		t.Errorf("%d drain-action series at start, want %d (one lane)", n, len(countedActions))
	}
}
