package admin

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/drainer"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestReplayMovesEachJobOnceWhenItBounces replays jobs that fail again at
// once, while a drainer runs: each lands back in the DLQ during the
// replay's scan, and the replay must not pick it up and move it again
// (it would chase a poison job for as long as the scan lasts).
func TestReplayMovesEachJobOnceWhenItBounces(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	const n = 3
	deadLetters(t, tb, time.Now().Add(-time.Hour), n, "a")
	var attempts atomic.Int64
	d, err := drainer.New(drainer.Config{
		Backend: tb.Backend, Topology: tb.Topo, Logger: topotest.QuietLog,
		Handler: drainer.HandlerFunc(func(context.Context, *drainer.Job) error {
			attempts.Add(1)
			return drainer.Permanent(errors.New("still broken"))
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, RatePerSecond: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := waitReplay(t, a, resp.GetReplay().GetId())
	if r.GetMoved() != n {
		t.Fatalf("replay moved %d jobs, want each of the %d once: %v", r.GetMoved(), n, r)
	}
	topotest.WaitFor(t, func() bool { return d.Counts().DeadLettered == n })
	if got := len(listDLQ(t, a)); got != n || attempts.Load() != n {
		t.Fatalf("DLQ holds %d jobs after %d attempts, want the %d that bounced back once each", got, attempts.Load(), n)
	}
}
