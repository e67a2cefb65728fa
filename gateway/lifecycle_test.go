package gateway

import (
	"testing"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/startstop/startstoptest"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/tenant"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	startstoptest.Exercise(t, func(t *testing.T) startstop.Service {
		b := topotest.Setup(t, topotest.OneLane)
		s, err := New(Config{
			Backend: b.Backend, Topology: b.Topo, Tenants: func() *tenant.Config { return nil },
			Depth: depth.New(depth.Config{Backend: b.Backend, Queues: b.Topo.Names()}), Logger: topotest.QuietLog,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
