package e2e

import (
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/topology"
)

// TestIdempotencySurvivesSIGKILL submits with an idempotency key, kills
// the gateway with SIGKILL right after the OK, restarts it on the same
// data directory and retries: the retry gets the first job's id, marked
// duplicate, in each durability mode, and the store holds one job.
func TestIdempotencySurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	for _, fsync := range []string{"always", "interval:10ms"} {
		t.Run("fsync="+fsync, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := []string{
				"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "",
				"--data-dir", dir, "--fsync", fsync, "--drain=false",
				"--tenants", writeFile(t, dir, "tenants.yaml", tenantsYAML),
				"--queues", writeFile(t, dir, "queues.yaml", queuesYAML),
			}
			gw := start(t, "gateway", args...)
			c := client(t, gw.addr("gateway listening"))
			req := &ingestv1.SubmitRequest{Payload: []byte("charge card"), IdempotencyKey: "order-7"}
			first, err := c.Submit(withKey(t.Context(), "alpha-key-123"), req)
			if err != nil || first.GetDuplicate() {
				t.Fatalf("first submit: %v, %v", first, err)
			}
			_ = gw.stop(syscall.SIGKILL)

			gw = start(t, "gateway", args...)
			c = client(t, gw.addr("gateway listening"))
			retry, err := c.Submit(withKey(t.Context(), "alpha-key-123"), req)
			if err != nil {
				t.Fatal(err)
			}
			if retry.GetJobId() != first.GetJobId() || !retry.GetDuplicate() {
				t.Fatalf("retry after SIGKILL and restart: %v, want job %s marked duplicate", retry, first.GetJobId())
			}
			other, err := c.Submit(withKey(t.Context(), "beta-key-1234"), req)
			if err != nil || other.GetDuplicate() || other.GetJobId() == first.GetJobId() {
				t.Fatalf("another tenant's same key after the restart: %v, %v", other, err)
			}
			_ = gw.stop(syscall.SIGKILL)

			// The store holds the first job and the other tenant's, no more.
			topo, err := topology.Load(filepath.Join(dir, "queues.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := embeddedqueue.Open(filepath.Join(dir, "queues.db"), embeddedqueue.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			st, err := b.Stats(t.Context(), &queue.StatsParams{Queues: topo.Names()})
			if err != nil {
				t.Fatal(err)
			}
			var jobs int64
			for _, s := range st {
				jobs += s.Visible + s.InFlight + s.Delayed
			}
			if jobs != 2 {
				t.Fatalf("%d jobs stored, want 2: the retry must not store a second", jobs)
			}
		})
	}
}
