package admin

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// TestDryRunCountsWhatTheReplayWould: a DLQ of good jobs and malformed
// bodies. The dry run counted the malformed ones as matched and nothing
// failed, as if they would move; the replay itself fails them (they stay
// in the DLQ). The dry run must report the replay's counts.
func TestDryRunCountsWhatTheReplayWould(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	dlq := tb.Topo.DLQ("std")
	for i := range 3 {
		e := topotest.Envelope("a", fmt.Sprintf("good-%d", i), time.Now().Add(-time.Hour))
		e.DeadLetterReason = "attempts_exhausted"
		tb.Enqueue(t, dlq, e)
	}
	bad := garbage(t)
	entries := make([]queue.SendEntry, len(bad))
	for i, g := range bad {
		entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: g.body}
	}
	if _, err := tb.Backend.Send(t.Context(), &queue.SendParams{Queue: dlq, Entries: entries}); err != nil {
		t.Fatal(err)
	}
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	req := &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, RatePerSecond: ReplayRateMax}

	dryReq := proto.CloneOf(req)
	dryReq.DryRun = true
	dry, err := a.ReplayDLQ(t.Context(), dryReq)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := a.ReplayDLQ(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	d, r := dry.GetReplay(), waitReplay(t, a, resp.GetReplay().GetId())
	if r.GetMoved() != 3 || r.GetFailed() != int64(len(bad)) || r.GetMalformed() != int64(len(bad)) || d.GetMalformed() != int64(len(bad)) {
		t.Fatalf("replay: moved %d, failed %d, malformed %d (dry run: %d); want 3, %d, %[5]d, %[5]d", r.GetMoved(), r.GetFailed(), r.GetMalformed(), d.GetMalformed(), len(bad))
	}
	if d.GetMatched() != r.GetMatched() || d.GetFailed() != r.GetFailed() || d.GetSkipped() != r.GetSkipped() ||
		d.GetMatched()-d.GetFailed() != r.GetMoved() {
		t.Errorf("dry run: matched %d, failed %d, skipped %d; the replay matched %d, moved %d, failed %d, skipped %d",
			d.GetMatched(), d.GetFailed(), d.GetSkipped(), r.GetMatched(), r.GetMoved(), r.GetFailed(), r.GetSkipped())
	}
}
