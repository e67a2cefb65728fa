package drainer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
)

// TestFIFOHasNoTenantLimits: with sidelining off (a plain FIFO, every job
// held as one tenant's), the tenants' hard ceilings must not apply, as the
// --sideline flag says ("no tenant drain limits"). Every job was held as
// tenant "", whose limits the Limits function resolved to a tier's (the
// standard tier's, for a tenant the config does not know): a tier's
// max_in_flight or max_drain_rate capped the whole drainer.
func TestFIFOHasNoTenantLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits scheduler.Limits
	}{
		{"max in flight", scheduler.Limits{MaxInFlight: 1}},
		{"max rate", scheduler.Limits{MaxRate: 0.01, MaxBurst: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const jobs = 4
			tb := setup(t, oneLane)
			for i := range jobs {
				tb.enqueue(t, tb.topo.ShardQueue("std", i%2), testEnvelope(fmt.Sprintf("t%d", i), fmt.Sprintf("j%d", i), time.Now()))
			}
			var running atomic.Int32
			all, done := make(chan struct{}), make(chan struct{})
			h := HandlerFunc(func(ctx context.Context, _ *Job) error {
				if running.Add(1) == jobs {
					close(all)
				}
				select { // each job runs until all of them run at once
				case <-all:
					return nil
				case <-done:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			startDrainer(t, Config{
				Backend: tb.backend, Topology: tb.topo, Handler: h, Concurrency: jobs,
				Policy: sideliner.Policy{NoSideline: true},
				Limits: func(string) scheduler.Limits { return tt.limits },
			})
			t.Cleanup(func() { close(done) }) // before the drainer stops
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d jobs running at once after 10s with %d slots: the FIFO was held to a tenant's limits %+v",
					running.Load(), jobs, jobs, tt.limits)
			}
		})
	}
}
