package admin

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/envelope"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestScansDoNotStealARunningReplaysJobs starts a slow replay of tenant a
// over a DLQ where a's and b's jobs alternate, and, while it holds its
// first batch (half of them b's), lists the DLQ and starts a replay of b.
// A scan hides what it receives from every other scan, so before the fix
// the list came back short without saying so, and the replay of b ended
// "done" having missed the b jobs the first replay held: they stayed in
// the DLQ. The list must be refused with a reason, and the second replay
// must wait for the first and then move every b job.
func TestScansDoNotStealARunningReplaysJobs(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	const n = 10
	base := time.Now().Add(-time.Hour)
	var envs []*envelope.Envelope
	for i := range n {
		for _, tenant := range []string{"a", "b"} {
			e := topotest.Envelope(tenant, fmt.Sprintf("%s-%02d", tenant, i), base.Add(time.Duration(i)*time.Second))
			e.DeadLetterReason = "attempts_exhausted"
			envs = append(envs, e)
		}
	}
	tb.Enqueue(t, tb.Topo.DLQ("std"), envs...)
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)

	first, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"a"}}, RatePerSecond: 5})
	if err != nil {
		t.Fatal(err)
	}
	firstID := first.GetReplay().GetId()
	// The first replay has received its first batch and is moving it at 5/s.
	topotest.WaitFor(t, func() bool {
		r, err := a.GetReplay(t.Context(), &adminv1.GetReplayRequest{ReplayId: firstID})
		return err == nil && r.GetReplay().GetScanned() > 0
	})

	list, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{PageSize: 100})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition {
		t.Errorf("ListDLQ during a replay: %d jobs, %v; want FAILED_PRECONDITION naming the replay", len(list.GetJobs()), err)
	}
	dry, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"b"}}, DryRun: true})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition {
		t.Errorf("dry run during a replay: %v, %v; want FAILED_PRECONDITION", dry.GetReplay(), err)
	}

	second, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"b"}}, RatePerSecond: 1000})
	if err != nil {
		t.Fatal(err)
	}
	r1 := waitReplay(t, a, firstID)
	r2 := waitReplay(t, a, second.GetReplay().GetId())
	if r1.GetState() != adminv1.Replay_STATE_DONE || r1.GetMoved() != n {
		t.Errorf("replay of a: %s moved %d, want done with %d", r1.GetState(), r1.GetMoved(), n)
	}
	if r2.GetState() != adminv1.Replay_STATE_DONE || r2.GetMoved() != n {
		t.Errorf("replay of b: %s moved %d, want done with %d", r2.GetState(), r2.GetMoved(), n)
	}
	if s := tb.Stats(t, tb.Topo.DLQ("std")); s.Visible != 0 || s.InFlight != 0 {
		t.Errorf("DLQ after both replays: %+v, want empty", s)
	}
}
