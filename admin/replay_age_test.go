package admin

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/drainer"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/metrics"
)

type countHandler struct{ n atomic.Int64 }

func (h *countHandler) Handle(context.Context, *drainer.Job) error { h.n.Add(1); return nil }

// TestReplayedJobIsAgedFromItsReplay: a job accepted an hour ago,
// attempted at once and dead-lettered, is replayed (docs/operations.md
// "Replaying a DLQ safely"). Its first attempt after the replay is aged
// from the replay; aged from its acceptance, every replay of an old job
// paged the first-attempt-age alarm (Maximum > sla_seconds, 300 s by
// default; found in review).
func TestReplayedJobIsAgedFromItsReplay(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, `
max_receive_count: 3
lanes:
  - name: std
    shards: 4
    staleness_bound: 48h
`)
	accepted := time.Now().Add(-time.Hour)
	e := topotest.Envelope("a", "a-00", accepted)
	e.Attempts, e.DeadLetterReason = 5, "attempts_exhausted"
	e.FirstAttemptAt = timestamppb.New(accepted.Add(time.Second)) // its real first attempt, 1 s after acceptance
	tb.Enqueue(t, tb.Topo.DLQ("std"), e)

	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"a"}}, RatePerSecond: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if r := waitReplay(t, a, resp.GetReplay().GetId()); r.GetMoved() != 1 {
		t.Fatalf("replay: %v", r)
	}

	reg := prometheus.NewRegistry()
	h := &countHandler{}
	d, err := drainer.New(drainer.Config{
		Backend: tb.Backend, Topology: tb.Topo, Handler: h,
		Metrics: metrics.New(reg, metrics.Options{}), Logger: topotest.QuietLog, PollWait: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for h.n.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == metrics.NameAgeOfFirstAttempt {
			hs := f.GetMetric()[0].GetHistogram()
			if hs.GetSampleCount() != 1 || hs.GetSampleSum() > 300 {
				t.Errorf("%d first attempts recorded, aged %.0f s in all; want 1, aged from the replay (well under the default SLA of 300 s)", hs.GetSampleCount(), hs.GetSampleSum())
			}
			return
		}
	}
	t.Fatal("no age_of_first_attempt recorded")
}
