package drainer

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/startstop/startstoptest"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	startstoptest.Exercise(t, func(t *testing.T) startstop.Service {
		tb := setup(t, oneLane)
		d, err := New(Config{Backend: tb.backend, Topology: tb.topo, Handler: newRecorder(), Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
