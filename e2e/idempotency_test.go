package e2e

import (
	"testing"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/queue"
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
			cfg := gatewayCluster("")
			cfg.Args = []string{"--fsync", fsync}
			cl := startCluster(t, cfg)
			c := client(t, cl.Addr)
			req := &ingestv1.SubmitRequest{Payload: []byte("charge card"), IdempotencyKey: "order-7"}
			first, err := c.Submit(withKey(t.Context(), "alpha-key-123"), req)
			if err != nil || first.GetDuplicate() {
				t.Fatalf("first submit: %v, %v", first, err)
			}
			cl.Kill("gateway")
			if err := cl.StartRole(t.Context(), "gateway"); err != nil {
				t.Fatal(err)
			}
			c = client(t, cl.Addr)
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
			cl.Kill("gateway")

			// The store holds the first job and the other tenant's, no more.
			b, err := cl.OpenBackend(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			st, err := b.Stats(t.Context(), &queue.StatsParams{Queues: cl.Topology.Names()})
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
