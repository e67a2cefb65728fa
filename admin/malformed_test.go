package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/drainer"
	"github.com/sluice-dev/sluice/envelope"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// garbage are message bodies that are not envelopes the gateway could have
// written, with the reason each is dead-lettered for.
func garbage(t testing.TB) []struct {
	body   []byte
	reason string
} {
	t.Helper()
	marshal := func(e *envelope.Envelope) []byte {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := topotest.Envelope("t", "whole", time.Now())
	noTenant := topotest.Envelope("", "orphan", time.Now())
	badTime := topotest.Envelope("t", "when", time.Now())
	badTime.ExpiresAt = &timestamppb.Timestamp{Seconds: 1, Nanos: -1}
	noTime := topotest.Envelope("t", "timeless", time.Now())
	noTime.EnqueuedAt = nil
	return []struct {
		body   []byte
		reason string
	}{
		{[]byte{0xff, 0xff, 0xff}, "malformed_envelope: not an envelope: "},
		{[]byte("hello, I am not protobuf"), "malformed_envelope: not an envelope: "},
		{marshal(good)[:len(marshal(good))-3], "malformed_envelope: "}, // truncated
		{marshal(&envelope.Envelope{Tenant: "t", Payload: []byte("x")}), "malformed_envelope: no job_id"},
		{marshal(noTenant), "malformed_envelope: no tenant"},
		{marshal(noTime), "malformed_envelope: no enqueued_at"},
		{marshal(badTime), "malformed_envelope: expires_at: "},
	}
}

// TestMalformedEnvelopesGoToTheDLQ puts raw garbage on a shard queue
// through the backend, between valid jobs: the drainer delivers the valid
// ones, dead-letters each bad one with its reason, and keeps running; the
// DLQ listing shows the garbage as undecodable with that reason and its
// raw bytes; a replay of every tenant cannot move it and leaves it there.
func TestMalformedEnvelopesGoToTheDLQ(t *testing.T) {
	t.Parallel()
	topotest.OnEachBackend(t, topotest.OneLane, testMalformedEnvelopes)
}

func testMalformedEnvelopes(t *testing.T, tb *topotest.Bundle) {
	bad := garbage(t)
	q := tb.Topo.ShardQueue("std", 1)
	tb.Enqueue(t, q, topotest.Envelope("t", "before", time.Now()))
	entries := make([]queue.SendEntry, len(bad))
	for i, g := range bad {
		entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: g.body}
	}
	res, err := tb.Backend.Send(t.Context(), &queue.SendParams{Queue: q, Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	tb.Enqueue(t, q, topotest.Envelope("t", "after", time.Now()))

	var mu sync.Mutex
	var got []string
	d, err := drainer.New(drainer.Config{
		Backend: tb.Backend, Topology: tb.Topo, Logger: topotest.QuietLog, PollWait: 200 * time.Millisecond,
		Handler: drainer.HandlerFunc(func(_ context.Context, j *drainer.Job) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, j.ID)
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	topotest.WaitFor(t, func() bool { c := d.Counts(); return c.Delivered == 2 && c.DeadLettered == int64(len(bad)) })
	mu.Lock()
	slices.Sort(got)
	if !slices.Equal(got, []string{"after", "before"}) {
		t.Fatalf("delivered %v", got)
	}
	mu.Unlock()

	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	list := listDLQ(t, a)
	if len(list) != len(bad) {
		t.Fatalf("DLQ lists %d jobs, want %d", len(list), len(bad))
	}
	for _, g := range bad {
		found := false
		for _, dl := range list {
			if string(dl.GetPayloadPreview()) == string(g.body[:min(len(g.body), 64)]) && dl.GetPayloadBytes() == int64(len(g.body)) {
				found = true
				if !strings.HasPrefix(dl.GetReason(), g.reason) || dl.GetLastError() == "" || !strings.HasSuffix(dl.GetReason(), ": "+dl.GetLastError()) || dl.GetTenant() != "" || dl.GetJobId() != "" || dl.GetLane() != "std" {
					t.Errorf("body %q listed as %v, want reason %q", g.body, dl, g.reason)
				}
			}
		}
		if !found {
			t.Errorf("body %q not listed", g.body)
		}
	}
	// A tenant filter never matches garbage; a reason filter does.
	for _, tt := range []struct {
		filter *adminv1.DLQFilter
		want   int
	}{
		{&adminv1.DLQFilter{Tenants: []string{"t"}}, 0},
		{&adminv1.DLQFilter{ReasonPrefix: "malformed_envelope: no tenant"}, 1},
		{&adminv1.DLQFilter{ReasonPrefix: "malformed_envelope"}, len(bad)},
	} {
		resp, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{Filter: tt.filter, PageSize: 100})
		if err != nil || len(resp.GetJobs()) != tt.want {
			t.Errorf("filter %v: %d jobs (%v), want %d", tt.filter, len(resp.GetJobs()), err, tt.want)
		}
	}
	resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, RatePerSecond: 1000})
	if err != nil {
		t.Fatal(err)
	}
	r := waitReplay(t, a, resp.GetReplay().GetId())
	if r.GetState() != adminv1.Replay_STATE_DONE || r.GetMoved() != 0 || r.GetFailed() != int64(len(bad)) || r.GetMalformed() != int64(len(bad)) {
		t.Fatalf("replay of garbage: %v", r)
	}
	if n := len(listDLQ(t, a)); n != len(bad) {
		t.Fatalf("DLQ holds %d after the replay, want %d", n, len(bad))
	}
}
