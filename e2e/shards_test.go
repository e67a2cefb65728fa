package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/queue"
)

// TestFewerShardsStillDeliversTheirJobs accepts jobs on a lane of 8
// shards, then starts the drainers with the lane cut to 2 shards: every
// job is delivered, those left in the 6 shard queues the lane no longer
// has included, and the draining process logs that it drains them. The
// drainers used to read only the lane's current shards, so jobs in the
// others waited, unseen (not even in the stats), until the shards were
// raised again. On the embedded backend the gateway drains (it restarts
// with the new file); on SQS a drainer process starts with it.
func TestFewerShardsStillDeliversTheirJobs(t *testing.T) {
	t.Parallel()
	const lanes = "prefix: %s\nlanes:\n  - {name: premium}\n  - {name: standard, shards: %d}\n  - {name: free}\n"
	for _, tt := range []struct {
		backend  string
		drainers int
		drainer  string // the role that logs what it drains
	}{
		{testcluster.Embedded, 0, "gateway"},
		{testcluster.SQS, 1, "drainer"},
	} {
		t.Run(tt.backend, func(t *testing.T) {
			t.Parallel()
			prefix := fmt.Sprintf("e2eshards%d", os.Getpid())
			w := startWorker(t)
			cl := startCluster(t, testcluster.ClusterConfig{
				Backend: tt.backend, Drainers: tt.drainers, Queues: fmt.Sprintf(lanes, prefix, 8), Tenants: tenantsYAML,
				WorkerAddr: w.Addr, Idle: true,
			})
			c := client(t, cl.Addr)
			var ids []string
			for i := range 20 {
				resp, err := c.Submit(withKey(t.Context(), "beta-key-1234"), &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "job-%d", i)})
				if err != nil {
					t.Fatalf("submit %d: %v", i, err)
				}
				ids = append(ids, resp.GetJobId())
			}
			if tt.backend == testcluster.Embedded {
				cl.Kill("gateway") // it holds the store
			}
			if left := jobsIn(t, cl, 2, 8); left == 0 {
				t.Fatal("no job in standard's shards 2 to 7: the test needs a tenant that hashes to one of them")
			} else {
				t.Logf("%d of %d jobs are in the shards about to be removed", left, len(ids))
			}

			if err := os.WriteFile(filepath.Join(cl.Dir, "queues.yaml"), fmt.Appendf(nil, lanes, prefix, 2), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := cl.SetDraining(t.Context(), true); err != nil {
				t.Fatal(err)
			}
			w.waitFor(t, ids)
			line := role(t, cl, tt.drainer).waitLog("the lane has fewer shards than before and its removed shard queues hold jobs: they are drained, and get no new job")
			if line["lane"] != "standard" || !strings.Contains(fmt.Sprint(line["retired_queues"]), prefix+"-standard-shard-0") {
				t.Errorf("log line %v, want lane standard and its removed shard queues", line)
			}
		})
	}
}

// jobsIn counts the jobs in standard's shard queues from to to-1.
func jobsIn(t *testing.T, cl *testcluster.Cluster, from, to int) int64 {
	t.Helper()
	b, err := cl.OpenBackend(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var names []string
	for i := from; i < to; i++ {
		names = append(names, cl.Topology.ShardQueue("standard", i))
	}
	st, err := b.Stats(t.Context(), &queue.StatsParams{Queues: names})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range st {
		n += s.Visible + s.InFlight + s.Delayed
	}
	return n
}
