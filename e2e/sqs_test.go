package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/test/fauxqs"
)

var (
	fauxOnce sync.Once
	faux     *fauxqs.Server
	fauxErr  error
)

// sqsEndpoint starts the local SQS-compatible server once per test binary
// (TestMain stops it) and returns its endpoint.
func sqsEndpoint(t *testing.T) string {
	t.Helper()
	fauxOnce.Do(func() {
		faux, fauxErr = fauxqs.Start(t.Context(), os.Stderr)
	})
	if fauxErr != nil {
		t.Fatalf("start the local SQS-compatible server: %v", fauxErr)
	}
	return faux.Endpoint
}

// TestDistributedOnSQS runs sluice as production does: a stateless gateway
// and two drainers as separate processes sharing queues on an SQS-compatible
// server, and sees every accepted job delivered.
func TestDistributedOnSQS(t *testing.T) {
	t.Parallel()
	endpoint := sqsEndpoint(t)
	dir := t.TempDir()
	prefix := fmt.Sprintf("e2e%d", os.Getpid())
	queues := writeFile(t, dir, "queues.yaml", "prefix: "+prefix+"\n"+queuesYAML)
	tenants := writeFile(t, dir, "tenants.yaml", tenantsYAML)
	sqsArgs := []string{"--backend", "sqs", "--sqs-endpoint", endpoint, "--aws-region", fauxqs.Region, "--queues", queues, "--tenants", tenants}

	gw := start(t, "gateway", append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", dir, "--create-queues", "--drain=false"}, sqsArgs...)...)
	addr := gw.addr("gateway listening")
	w := startWorker(t)
	var drainers []*proc
	for i := range 2 {
		d := start(t, "drainer", append([]string{"run", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", fmt.Sprintf("%s/d%d", dir, i), "--worker-addr", w.Addr, "--concurrency", "8"}, sqsArgs...)...)
		d.waitLog("admin API listening")
		drainers = append(drainers, d)
	}

	c := client(t, addr)
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
	console := consoleClient(t, strings.TrimSuffix(drainers[0].waitLog("web console listening")["url"].(string), "/"), strings.TrimSpace(readFile(t, dir+"/d0/admin-key")))
	if page := console("/"); !strings.Contains(page, `id="lane-premium"`) || !strings.Contains(page, prefix+"-premium-dlq") {
		t.Errorf("console overview on SQS does not show the lanes and queues:\n%s", page)
	}
	if page := console("/dlq"); !strings.Contains(page, "No dead-lettered jobs match") {
		t.Errorf("console DLQ page on SQS:\n%s", page)
	}
	scrape(t, gw, `sluice_backend_calls_total{operation="SendMessageBatch"}`, `sluice_jobs_submitted_total`)
	scrape(t, drainers[0], `sluice_backend_calls_total{operation="ReceiveMessage"}`, `sluice_queue_visible_messages`, `sluice_drain_actions_total{action="delivered"`)

	// Stop everything and read each process's API call counts.
	var calls int64
	for _, p := range append([]*proc{gw}, drainers...) {
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
