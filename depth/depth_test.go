package depth_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/startstop/startstoptest"
	"github.com/sluice-dev/sluice/internal/topotest"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	startstoptest.Exercise(t, func(t *testing.T) startstop.Service {
		b := topotest.Setup(t, topotest.OneLane)
		return depth.New(depth.Config{Backend: b.Backend, Queues: b.Topo.Names(), Logger: topotest.QuietLog})
	})
}

// TestRefreshAndAdd reads real queue depths and counts local sends.
func TestRefreshAndAdd(t *testing.T) {
	t.Parallel()
	b := topotest.Setup(t, topotest.OneLane)
	q := b.Topo.ShardQueue("std", 0)
	b.Enqueue(t, q, topotest.Envelope("t", "a", time.Now()), topotest.Envelope("t", "b", time.Now()))
	c := depth.New(depth.Config{Backend: b.Backend, Queues: b.Topo.Names(), Logger: topotest.QuietLog})
	if err := c.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.Add(q, 3)
	tests := []struct {
		queue string
		want  int64
	}{
		{q, 5},
		{b.Topo.ShardQueue("std", 1), 0},
		{"not-a-queue", 0},
	}
	for _, tt := range tests {
		if got := c.Waiting(tt.queue); got != tt.want {
			t.Errorf("Waiting(%s) = %d, want %d", tt.queue, got, tt.want)
		}
	}
}
