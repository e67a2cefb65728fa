package admin

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/startstop/startstoptest"
	"github.com/sluice-dev/sluice/internal/topotest"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	startstoptest.Exercise(t, func(t *testing.T) startstop.Service {
		tb := topotest.Setup(t, topotest.OneLane)
		return NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	})
}

// TestStopEndsReplays stops the API during a slow replay: Stop cancels it
// and waits for it to hand back its messages, and a replay asked for
// afterwards is refused as UNAVAILABLE.
func TestStopEndsReplays(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	deadLetters(t, tb, time.Now().Add(-time.Hour), 20, "a")
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, RatePerSecond: 1})
	if err != nil {
		t.Fatal(err)
	}
	stopAdmin(t, a)
	r, ok := a.replays.get(resp.GetReplay().GetId())
	if !ok || r.GetState() != adminv1.Replay_STATE_CANCELLED {
		t.Fatalf("replay after Stop: %v", r)
	}
	if s := tb.Stats(t, tb.Topo.DLQ("std")); s.InFlight != 0 || s.Visible+r.GetMoved() != 20 {
		t.Fatalf("DLQ after Stop: %+v, %d moved: want every message back or moved", s, r.GetMoved())
	}
	_, err = a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("replay after Stop: %v, want UNAVAILABLE", err)
	}
}
