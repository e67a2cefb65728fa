package drainer

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/topology"
)

// TestFreshJobsPastABacklog: a shard holds 20,000 jobs left by an
// outage, older than the lane's staleness bound, and then a fresh job.
// The fresh job is delivered while most of the backlog is still unread
// (the drainer reads the shard's fresh jobs past its head on the
// embedded backend), and then the whole backlog is. Read from the head alone, it waited until the whole
// backlog had been read and moved: with 5 million jobs, minutes.
func TestFreshJobsPastABacklog(t *testing.T) {
	t.Parallel()
	const backlog = 20_000
	var skew atomic.Int64 // the store's clock, behind while the backlog is stored
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "queues.db"), embeddedqueue.Options{Logger: quietLog, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	topo, err := topology.Parse([]byte(moveLane))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureQueues(t.Context(), topo.Specs()); err != nil {
		t.Fatal(err)
	}
	shard := topo.ShardQueue("std", 0)

	skew.Store(int64(-time.Hour))
	old := clock()
	sends := make([]*queue.SendParams, 0, backlog/queue.MaxBatch)
	for i := range backlog / queue.MaxBatch {
		entries := make([]queue.SendEntry, queue.MaxBatch)
		for k := range entries {
			body, err := envelope.Encode(testEnvelope("outage", fmt.Sprintf("old-%d-%d", i, k), old))
			if err != nil {
				t.Fatal(err)
			}
			entries[k] = queue.SendEntry{ID: fmt.Sprint(k), Body: body}
		}
		sends = append(sends, &queue.SendParams{Queue: shard, Entries: entries})
	}
	if _, errs := b.SendMany(t.Context(), sends); errs != nil {
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	skew.Store(0)
	tb := &testBundle{backend: b, topo: topo, Bundle: &topotest.Bundle{Backend: b, Topo: topo}}
	tb.enqueue(t, shard, testEnvelope("fresh", "fresh-1", time.Now()))

	fresh := make(chan time.Time, 1)
	var delivered atomic.Int64
	handler := HandlerFunc(func(_ context.Context, j *Job) error {
		if j.Tenant == "fresh" {
			fresh <- time.Now()
		}
		delivered.Add(1)
		return nil
	})
	start := time.Now()
	startDrainer(t, Config{Backend: b, Topology: topo, Handler: handler, Concurrency: 8})
	select {
	case at := <-fresh:
		left := tb.Stats(t, shard).Visible
		t.Logf("the fresh job was delivered %s after the start, with %d of the %d backlog jobs still unread in its shard", at.Sub(start), left, backlog)
		if left < backlog/2 {
			t.Fatalf("the fresh job was delivered once %d of %d backlog jobs had been read: it waited behind the backlog", backlog-left, backlog)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fresh job was not delivered in 30s")
	}
	// And the backlog is delivered too, through the backlog queue.
	deadline := time.Now().Add(60 * time.Second)
	for delivered.Load() < backlog+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs delivered in 60s", delivered.Load(), backlog+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
