package drainer

import (
	"errors"
	"testing"
	"time"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

// TestReplayMovesEachJobOnceWhenItBounces replays jobs that fail again at
// once, while a drainer runs: each lands back in the DLQ during the
// replay's scan, and the replay must not pick it up and move it again
// (it would chase a poison job for as long as the scan lasts).
func TestReplayMovesEachJobOnceWhenItBounces(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	const n = 3
	deadLetters(t, tb, time.Now().Add(-time.Hour), n, "a")
	rec := newRecorder()
	rec.fail = func(*Job) error { return Permanent(errors.New("still broken")) }
	d := startDrainer(t, Config{Backend: tb.backend, Topology: tb.topo, Handler: rec})
	a := NewAdminServer(tb.backend, tb.topo, quietLog)
	defer a.Close()
	resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, RatePerSecond: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := waitReplay(t, a, resp.GetReplay().GetId())
	if r.GetMoved() != n {
		t.Fatalf("replay moved %d jobs, want each of the %d once: %v", r.GetMoved(), n, r)
	}
	waitFor(t, func() bool { return d.Counts().DeadLettered == n })
	if got := len(listDLQ(t, a)); got != n {
		t.Fatalf("DLQ holds %d jobs, want the %d that bounced back", got, n)
	}
}
