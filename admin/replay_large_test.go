package admin

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestReplayMovesMoreThanTheScanHolds: the scan bound is on the messages
// a scan holds at once, and a replay holds none of the jobs it has moved.
// It counted every message received, so a replay of more dead letters
// than the bound (100,000) ended FAILED part way, asking for a narrower
// filter, with the rest still in the DLQ. A listing still stops at the
// bound.
func TestReplayMovesMoreThanTheScanHolds(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	deadLetters(t, tb, time.Now().Add(-time.Hour), 30, "a")
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	a.replays.scanLimit = 20

	if _, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{PageSize: 100}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("listing 30 dead letters over a bound of 20: %v, want FAILED_PRECONDITION", err)
	}
	resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"a"}}, RatePerSecond: ReplayRateMax})
	if err != nil {
		t.Fatal(err)
	}
	r := waitReplay(t, a, resp.GetReplay().GetId())
	if r.GetState() != adminv1.Replay_STATE_DONE || r.GetMoved() != 30 {
		t.Fatalf("replay of 30 dead letters with a scan bound of 20: %s after moving %d (%s), want done with all 30 moved", r.GetState(), r.GetMoved(), r.GetError())
	}
	if s := tb.Stats(t, tb.Topo.DLQ("std")); s.Visible+s.InFlight != 0 {
		t.Fatalf("DLQ after the replay: %+v, want empty", s)
	}
}

// TestReplayStopsAtItsMax: a replay that has taken max_jobs jobs ends
// there. It read on through the rest of the DLQ looking for one more,
// holding every other job it read (lists and dry runs refused meanwhile)
// until the DLQ ran out, or the scan bound ended it FAILED, asking for a
// narrower filter, after it had done all it was asked.
func TestReplayStopsAtItsMax(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	deadLetters(t, tb, time.Now().Add(-time.Hour), 5, "a")
	deadLetters(t, tb, time.Now().Add(-time.Hour), 30, "b")
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	a.replays.scanLimit = 20

	for _, dry := range []bool{true, false} {
		resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"a"}}, DryRun: dry, MaxJobs: 5, RatePerSecond: ReplayRateMax})
		if err != nil {
			t.Fatal(err)
		}
		r := waitReplay(t, a, resp.GetReplay().GetId())
		want := int64(5)
		if dry {
			want = 0
		}
		if r.GetState() != adminv1.Replay_STATE_DONE || r.GetMatched() != 5 || r.GetMoved() != want || r.GetScanned() != 5 {
			t.Errorf("replay (dry run %v) of tenant a's 5 jobs, --max 5, before 30 of b: %s (%s), scanned %d, matched %d, moved %d; want done after scanning 5, matching 5, moving %d",
				dry, r.GetState(), r.GetError(), r.GetScanned(), r.GetMatched(), r.GetMoved(), want)
		}
	}
}
