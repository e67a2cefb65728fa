package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/queue"
)

// TestFewerShardsStillDeliversTheirJobs accepts jobs on a lane of 8
// shards, then restarts the gateway with drainers and the lane cut to 2
// shards: every job is delivered, those left in the 6 shard queues the
// lane no longer has included, and the gateway logs that it drains them.
// The drainers used to read only the lane's current shards, so jobs in the
// others waited, unseen (not even in the stats), until the shards were
// raised again.
func TestFewerShardsStillDeliversTheirJobs(t *testing.T) {
	t.Parallel()
	const lanes = "lanes:\n  - {name: premium}\n  - {name: standard, shards: %d}\n  - {name: free}\n"
	w := startWorker(t)
	cfg := gatewayCluster(w.Addr)
	cfg.Idle, cfg.Queues = true, fmt.Sprintf(lanes, 8)
	cl := startCluster(t, cfg)
	c := client(t, cl.Addr)
	var ids []string
	for i := range 20 {
		resp, err := c.Submit(withKey(t.Context(), "beta-key-1234"), &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "job-%d", i)})
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		ids = append(ids, resp.GetJobId())
	}
	cl.Kill("gateway")

	// Some of them sit in the shards about to be removed.
	b, err := cl.OpenBackend(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	for i := 2; i < 8; i++ {
		removed = append(removed, cl.Topology.ShardQueue("standard", i))
	}
	st, err := b.Stats(t.Context(), &queue.StatsParams{Queues: removed})
	if err != nil {
		t.Fatal(err)
	}
	var left int64
	for _, s := range st {
		left += s.Visible
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		t.Fatal("no job in standard's shards 2 to 7: the test needs a tenant that hashes to one of them")
	}

	if err := os.WriteFile(filepath.Join(cl.Dir, "queues.yaml"), fmt.Appendf(nil, lanes, 2), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetDraining(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, ids)
	line := role(t, cl, "gateway").waitLog("the lane has fewer shards than before and its removed shard queues hold jobs: they are drained, and get no new job")
	if line["lane"] != "standard" || !strings.Contains(fmt.Sprint(line["retired_queues"]), "shard-0") {
		t.Errorf("log line %v, want lane standard and its removed shard queues", line)
	}
	t.Logf("%d of %d jobs were in the removed shards", left, len(ids))
}
