package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

const tenantsYAML = `
tenants:
  - id: alpha
    tier: premium
    api_keys: [alpha-key-123]
  - id: beta
    tier: standard
    api_keys: [beta-key-1234]
  - id: gamma
    tier: free
    api_keys: [gamma-key-123]
  - id: slow
    tier: standard
    api_keys: [slow-key-1234]
    submit_rate: 0.1
    submit_burst: 2
`

// queuesYAML gives the standard lane a high-water mark of 5 jobs, so the
// standard tier (80 %) is refused from a backlog of 4.
const queuesYAML = `
lanes:
  - {name: premium, shards: 4, weight: 6}
  - {name: standard, shards: 4, weight: 3, high_water_mark: 5, capacity: 2}
  - {name: free, shards: 2, weight: 1}
`

// gatewayCluster is a gateway on the embedded backend with the shared
// tenants and topology, draining to worker (none: --drain=false).
func gatewayCluster(worker string) testcluster.ClusterConfig {
	return testcluster.ClusterConfig{Backend: testcluster.Embedded, Queues: queuesYAML, Tenants: tenantsYAML, WorkerAddr: worker, Idle: worker == ""}
}

// startGateway starts a gatewayCluster and returns its gateway and ingest
// address.
func startGateway(t *testing.T, worker string) (*proc, string) {
	t.Helper()
	cl := startCluster(t, gatewayCluster(worker))
	return role(t, cl, "gateway"), cl.Addr
}

func TestDeliversJobsOfSeveralTenants(t *testing.T) {
	t.Parallel()
	w := startWorker(t)
	gw, addr := startGateway(t, w.Addr)
	c := client(t, addr)

	want := map[string]string{} // job id → tenant
	for _, key := range []string{"alpha-key-123", "beta-key-1234", "gamma-key-123"} {
		tenant, _, _ := strings.Cut(key, "-")
		for i := range 3 {
			resp, err := c.Submit(withKey(t.Context(), key), &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "%s-%d", tenant, i)})
			if err != nil {
				t.Fatalf("submit as %s: %v", tenant, err)
			}
			want[resp.GetJobId()] = tenant
		}
		batch := &ingestv1.SubmitBatchRequest{}
		for i := range 5 {
			batch.Jobs = append(batch.Jobs, &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "%s-batch-%d", tenant, i)})
		}
		resp, err := c.SubmitBatch(withKey(t.Context(), key), batch)
		if err != nil {
			t.Fatalf("batch as %s: %v", tenant, err)
		}
		for i, r := range resp.GetResults() {
			if r.GetError() != nil || r.GetJobId() == "" {
				t.Fatalf("batch item %d as %s: %v", i, tenant, r.GetError())
			}
			want[r.GetJobId()] = tenant
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	w.waitFor(t, ids)
	for id, tenant := range want {
		got := w.Job(id)
		if got.GetTenant() != tenant || !strings.HasPrefix(string(got.GetPayload()), tenant+"-") || got.GetAttempt() != 1 {
			t.Errorf("job %s delivered as tenant %q payload %q attempt %d, want tenant %q", id, got.GetTenant(), got.GetPayload(), got.GetAttempt(), tenant)
		}
	}
	scrape(t, gw,
		`sluice_jobs_submitted_total{lane="premium",outcome="admitted",tenant="alpha",tier="premium"} 8`,
		`sluice_drain_actions_total{action="delivered",lane="free",reason=""} 8`,
		`sluice_dwell_seconds_count{lane="standard"} 8`,
		`sluice_age_of_first_attempt_seconds_count{lane="standard"} 8`,
		`sluice_queue_visible_messages{kind="shard",lane="premium",queue="sluice-premium-shard-00"}`,
		`sluice_enqueue_latency_seconds_bucket`,
		`sluice_store_write_seconds_bucket`,
		`sluice_store_write_operations_total`,
		`sluice_store_checkpoint_seconds_bucket{outcome="ok"`,
		`sluice_store_corrupt_messages_total 0`,
	)
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	_, addr := startGateway(t, "")
	c := client(t, addr)
	ctx := t.Context()

	t.Run("unknown key", func(t *testing.T) {
		_, err := c.Submit(withKey(ctx, "not-a-key-at-all"), &ingestv1.SubmitRequest{Payload: []byte("x")})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("err = %v, want UNAUTHENTICATED", err)
		}
	})
	t.Run("missing key", func(t *testing.T) {
		_, err := c.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("x")})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("err = %v, want UNAUTHENTICATED", err)
		}
	})
	t.Run("oversize payload", func(t *testing.T) {
		// The free tier accepts up to 16 KiB.
		_, err := c.Submit(withKey(ctx, "gamma-key-123"), &ingestv1.SubmitRequest{Payload: make([]byte, 16*1024+1)})
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument {
			t.Fatalf("err = %v, want INVALID_ARGUMENT", err)
		}
		br := detail[*errdetails.BadRequest](st)
		if br == nil || br.GetFieldViolations()[0].GetField() != "payload" {
			t.Fatalf("details = %v, want a BadRequest on payload", st.Details())
		}
	})
	t.Run("over quota", func(t *testing.T) {
		// slow: burst 2, then one token every 10 s.
		var err error
		for range 3 {
			if _, err = c.Submit(withKey(ctx, "slow-key-1234"), &ingestv1.SubmitRequest{Payload: []byte("x")}); err != nil {
				break
			}
		}
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted {
			t.Fatalf("third submit: %v, want RESOURCE_EXHAUSTED", err)
		}
		ri := detail[*errdetails.RetryInfo](st)
		if d := ri.GetRetryDelay().AsDuration(); d <= 5*time.Second || d > 10*time.Second {
			t.Fatalf("retry delay %s, want the time to the next token (≤ 10s)", d)
		}
		if qf := detail[*errdetails.QuotaFailure](st); qf == nil || !strings.Contains(qf.GetViolations()[0].GetSubject(), "slow") {
			t.Fatalf("quota failure = %v", qf)
		}
	})
	t.Run("idempotency key", func(t *testing.T) {
		req := &ingestv1.SubmitRequest{Payload: []byte("once"), IdempotencyKey: "order-42"}
		first, err := c.Submit(withKey(ctx, "alpha-key-123"), req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.Submit(withKey(ctx, "alpha-key-123"), req)
		if err != nil {
			t.Fatal(err)
		}
		if again.GetJobId() != first.GetJobId() || !again.GetDuplicate() || first.GetDuplicate() {
			t.Fatalf("first %v, repeat %v: want the same id marked duplicate", first, again)
		}
		// The key is per tenant.
		other, err := c.Submit(withKey(ctx, "beta-key-1234"), req)
		if err != nil || other.GetDuplicate() || other.GetJobId() == first.GetJobId() {
			t.Fatalf("another tenant's same key: %v, %v", other, err)
		}
	})
}

func TestHighWaterMark(t *testing.T) {
	t.Parallel()
	// No drainers: the standard lane's backlog only grows.
	_, addr := startGateway(t, "")
	c := client(t, addr)
	err := fillStandardLane(t, c)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("err = %v, want RESOURCE_EXHAUSTED", err)
	}
	// Backlog 4, threshold 4, drain rate 2/s: (4-4+1)/2 s, raised to the 1 s floor.
	if d := detail[*errdetails.RetryInfo](st).GetRetryDelay().AsDuration(); d != time.Second {
		t.Fatalf("retry delay %s, want 1s", d)
	}
	// Other lanes are not affected.
	if _, err := c.Submit(withKey(t.Context(), "alpha-key-123"), &ingestv1.SubmitRequest{Payload: []byte("x")}); err != nil {
		t.Fatalf("premium submit: %v", err)
	}
}

// fillStandardLane submits as beta (standard tier) until refused, checks
// that 4 jobs were accepted first (queuesYAML's high-water mark 5 ×
// standard's 80 %), and returns the refusal.
func fillStandardLane(t *testing.T, c ingestv1.IngestServiceClient) error {
	t.Helper()
	accepted := 0
	var err error
	for range 10 {
		if _, err = c.Submit(withKey(t.Context(), "beta-key-1234"), &ingestv1.SubmitRequest{Payload: []byte("x")}); err != nil {
			break
		}
		accepted++
	}
	if accepted != 4 {
		t.Fatalf("accepted %d jobs before the refusal (%v), want 4", accepted, err)
	}
	return err
}

// TestNothingLostOnSIGKILL kills the gateway after its OKs and before any
// delivery, restarts it on the same data directory and sees every job.
func TestNothingLostOnSIGKILL(t *testing.T) {
	t.Parallel()
	w := startWorker(t)
	cfg := gatewayCluster(w.Addr)
	cfg.Idle = true
	cl := startCluster(t, cfg)
	c := client(t, cl.Addr)

	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				resp, err := c.Submit(withKey(t.Context(), "alpha-key-123"), &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "g%d-%d", g, i)})
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				mu.Lock()
				ids = append(ids, resp.GetJobId())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	cl.Kill("gateway")

	// Restarted on the same data directory, now draining.
	if err := cl.SetDraining(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, ids)
}

func TestSIGTERMExitsCleanly(t *testing.T) {
	t.Parallel()
	w := startWorker(t)
	p, addr := startGateway(t, w.Addr)
	resp, err := client(t, addr).Submit(withKey(t.Context(), "beta-key-1234"), &ingestv1.SubmitRequest{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, []string{resp.GetJobId()})
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	p.waitLog("drainer stopped")
	p.waitLog("gateway stopped")
}

func detail[T any](st *status.Status) T {
	var zero T
	for _, d := range st.Details() {
		if v, ok := d.(T); ok {
			return v
		}
	}
	return zero
}

// TestHeldJobsComeBackAtOnceAfterSIGKILL: jobs a gateway (with its
// drainers) was delivering when it was killed are delivered again as soon
// as it starts again on the embedded backend, not after the lane's
// visibility timeout (a minute here): no other process could hold them,
// and they waited out the timeout all the same (found in a walkthrough).
func TestHeldJobsComeBackAtOnceAfterSIGKILL(t *testing.T) {
	t.Parallel()
	// Each job's first call is held until the gateway dies; later calls ack.
	w := startAnsweringWorker(t, func(ctx context.Context, _ *workerv1.ProcessRequest, call int) error {
		if call == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	cfg := gatewayCluster(w.Addr)
	cfg.Queues = `
lanes:
  - {name: premium, shards: 2, visibility_timeout: 1m}
  - {name: standard, shards: 2, visibility_timeout: 1m}
  - {name: free, shards: 2, visibility_timeout: 1m}
`
	cl := startCluster(t, cfg)
	c := client(t, cl.Addr)
	var ids []string
	for i := range 5 {
		resp, err := c.Submit(withKey(t.Context(), "alpha-key-123"), &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "held-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetJobId())
	}
	eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { return w.Calls() >= 5 }, "the worker got %d of the 5 jobs", w.Calls())
	cl.Kill("gateway")
	restarted := time.Now()
	if err := cl.StartRole(t.Context(), "gateway"); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitDelivered(t.Context(), ids, 20*time.Second); err != nil {
		t.Fatalf("after the restart: %v; the jobs waited for their visibility timeout (1m)", err)
	}
	t.Logf("all 5 held jobs delivered %s after the restart began", time.Since(restarted).Round(time.Millisecond))
	l := role(t, cl, "gateway").waitLog("made visible the messages the previous process held in flight: it stopped without answering them, and no other process can hold them")
	if n, _ := l["messages"].(float64); n != 5 {
		t.Errorf("the restarted gateway logged %v messages made visible, want the 5 held", l["messages"])
	}
}
