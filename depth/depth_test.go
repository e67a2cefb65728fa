package depth_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/startstop/startstoptest"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
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

// TestRefreshSurvivesAFailingQueue: one queue the backend cannot read (it
// was deleted, or its GetQueueAttributes is refused) must not freeze the
// depths of the others. Backend.Stats fails a whole call for one bad
// queue, and Refresh used to give up on the whole chunk of 100 and on
// every chunk after it, so the router and the high-water mark went on
// using the old depths, plus every local send since, for as long as the
// one queue stayed bad.
func TestRefreshSurvivesAFailingQueue(t *testing.T) {
	t.Parallel()
	many := make([]string, 120)
	for i := range many {
		many[i] = fmt.Sprintf("gone-%03d", i)
	}
	tests := []struct {
		name    string
		missing []string // queues Stats cannot read, listed before the topology's
	}{
		{"one missing queue in the same chunk", []string{"gone"}},
		{"missing queues fill the first chunk", many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := topotest.Setup(t, topotest.OneLane)
			q := b.Topo.ShardQueue("std", 0)
			b.Enqueue(t, q, topotest.Envelope("t", "a", time.Now()), topotest.Envelope("t", "b", time.Now()))
			queues := append(slices.Clone(tt.missing), b.Topo.Names()...)
			var observed []string
			c := depth.New(depth.Config{
				Backend: b.Backend, Queues: queues, Logger: topotest.QuietLog,
				Observe: func(s queue.Stats) { observed = append(observed, s.Queue) },
			})
			err := c.Refresh(t.Context())
			if !errors.Is(err, queue.ErrQueueNotFound) {
				t.Errorf("Refresh: %v, want an error wrapping ErrQueueNotFound for the missing queue", err)
			}
			if got := c.Waiting(q); got != 2 {
				t.Errorf("Waiting(%s) = %d after a refresh with a missing queue among the others, want 2", q, got)
			}
			slices.Sort(observed)
			want := slices.Sorted(slices.Values(b.Topo.Names()))
			if !slices.Equal(observed, want) {
				t.Errorf("observed %v, want every readable queue %v", observed, want)
			}
		})
	}
}
