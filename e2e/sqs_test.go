package e2e

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// TestDistributedOnSQS runs sluice as production does: a stateless gateway
// and two drainers as separate processes sharing queues on an SQS-compatible
// server, and sees every accepted job delivered.
func TestDistributedOnSQS(t *testing.T) {
	t.Parallel()
	w := startWorker(t)
	prefix := fmt.Sprintf("e2e%d", os.Getpid())
	cl := startCluster(t, testcluster.ClusterConfig{
		Backend: testcluster.SQS, Queues: "prefix: " + prefix + "\n" + queuesYAML, Tenants: tenantsYAML,
		Drainers: 2, WorkerAddr: w.Addr, Concurrency: 8,
	})
	gw, drainer := role(t, cl, "gateway"), role(t, cl, "drainer-0")

	c := client(t, cl.Addr)
	var ids []string
	for _, key := range []string{"alpha-key-123", "beta-key-1234", "gamma-key-123"} {
		batch := &ingestv1.SubmitBatchRequest{}
		for i := range 20 {
			batch.Jobs = append(batch.Jobs, &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "%s-%d", key, i)})
		}
		resp, err := c.SubmitBatch(withKey(t.Context(), key), batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range resp.GetResults() {
			if r.GetError() != nil {
				// The standard lane's small high-water mark refuses beta
				// past a backlog of 4: that is admission, not loss.
				if strings.HasPrefix(key, "beta") && r.GetError().GetCode() == 8 {
					continue
				}
				t.Fatalf("%s job %d: %v", key, i, r.GetError())
			}
			ids = append(ids, r.GetJobId())
		}
		resp1, err := c.Submit(withKey(t.Context(), key), &ingestv1.SubmitRequest{Payload: []byte("single")})
		if err == nil {
			ids = append(ids, resp1.GetJobId())
		}
	}
	w.waitFor(t, ids)
	// The drainer's web console works on SQS too.
	console := consoleClient(t, strings.TrimSuffix(drainer.waitLog("web console listening")["url"].(string), "/"), cl.AdminKey)
	if page := console("/"); !strings.Contains(page, `id="lane-premium"`) || !strings.Contains(page, prefix+"-premium-dlq") {
		t.Errorf("console overview on SQS does not show the lanes and queues:\n%s", page)
	}
	if page := console("/dlq"); !strings.Contains(page, "No dead-lettered jobs match") {
		t.Errorf("console DLQ page on SQS:\n%s", page)
	}
	scrape(t, gw, `sluice_backend_calls_total{operation="SendMessageBatch"}`, `sluice_jobs_submitted_total`)
	scrape(t, drainer, `sluice_backend_calls_total{operation="ReceiveMessage"}`, `sluice_queue_visible_messages`, `sluice_drain_actions_total{action="delivered"`)

	// Stop everything and read each process's API call counts.
	var calls int64
	for _, name := range cl.Roles() {
		p := role(t, cl, name)
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		line := p.waitLog("backend API calls")
		t.Logf("%s API calls: %v", p.Spec.Name, line)
		calls += int64(line["total"].(float64))
	}
	t.Logf("%d jobs delivered by 2 drainers; %d backend API calls in all (gateway, drainers, depth polls): %.2f per delivered job",
		len(ids), calls, float64(calls)/float64(len(ids)))
}
