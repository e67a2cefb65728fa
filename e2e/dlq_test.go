package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// cli runs sluicectl and returns its output (stdout and stderr).
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(env.Bin, "sluicectl"), args...).CombinedOutput()
	return string(out), err
}

func TestPoisonJobDLQAndReplayByCLI(t *testing.T) {
	t.Parallel()
	// The worker fails jobs whose payload is "poison" until fixed.
	var fixed atomic.Bool
	base := startAnsweringWorker(t, func(_ context.Context, req *workerv1.ProcessRequest, _ int) error {
		if string(req.GetPayload()) == "poison" && !fixed.Load() {
			return status.Error(codes.Unavailable, "downstream is down")
		}
		return nil
	})
	cl := startCluster(t, testcluster.ClusterConfig{
		Backend: testcluster.Embedded, Queues: queuesYAML, Tenants: tenantsYAML, WorkerAddr: base.Addr,
		Args: []string{"--max-attempts", "2", "--retry-base", "1s", "--retry-cap", "1s"},
	})
	admin, adminKey := cl.AdminAddr, cl.AdminKey
	c := client(t, cl.Addr)
	poison, err := c.Submit(withKey(t.Context(), "alpha-key-123"), &ingestv1.SubmitRequest{Payload: []byte("poison")})
	if err != nil {
		t.Fatal(err)
	}
	good, err := c.Submit(withKey(t.Context(), "alpha-key-123"), &ingestv1.SubmitRequest{Payload: []byte("good")})
	if err != nil {
		t.Fatal(err)
	}
	base.waitFor(t, []string{good.GetJobId()})

	// The poison job reaches the DLQ after two attempts.
	common := []string{"--admin-addr", admin, "--admin-key", adminKey}
	var listing struct {
		Jobs []struct {
			JobID     string `json:"jobId"`
			Tenant    string `json:"tenant"`
			Reason    string `json:"reason"`
			LastError string `json:"lastError"`
		} `json:"jobs"`
	}
	listed := func() bool {
		out, err := cli(t, append([]string{"dlq", "list", "--json"}, common...)...)
		if err != nil {
			t.Fatalf("dlq list: %v: %s", err, out)
		}
		if err := json.Unmarshal([]byte(out), &listing); err != nil {
			t.Fatalf("dlq list --json: %v: %s", err, out)
		}
		return len(listing.Jobs) > 0
	}
	eventually(t, 60*time.Second, 200*time.Millisecond, listed, "poison job not in the DLQ within 60s")
	if j := listing.Jobs[0]; j.JobID != poison.GetJobId() || j.Tenant != "alpha" || j.Reason != "attempts_exhausted" ||
		!strings.Contains(j.LastError, "downstream is down") {
		t.Fatalf("DLQ listing: %+v", listing.Jobs)
	}
	table, err := cli(t, append([]string{"dlq", "list"}, common...)...)
	if err != nil || !strings.Contains(table, poison.GetJobId()) || !strings.Contains(table, "JOB ID") {
		t.Fatalf("dlq list table: %v: %s", err, table)
	}
	stats, err := cli(t, append([]string{"stats"}, common...)...)
	if err != nil || !strings.Contains(stats, "sluice-premium-dlq") {
		t.Fatalf("stats: %v: %s", err, stats)
	}

	// Clear errors for operator mistakes.
	mistakes := []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "list", "--admin-addr", admin, "--admin-key", "alpha-key-123"}, "refused the credential"},
		{[]string{"dlq", "list", "--admin-addr", "127.0.0.1:1", "--admin-key", adminKey, "--timeout", "2s"}, "cannot reach the admin API"},
		{[]string{"dlq", "list", "--admin-addr", admin, "--data-dir", t.TempDir()}, "no admin key"},
		{append([]string{"dlq", "list", "--since", "yesterday"}, common...), "--since \"yesterday\""},
		{append([]string{"dlq", "replay"}, common...), "say whose jobs to replay: --tenant T1,T2, or --all-tenants"},
		{append([]string{"dlq", "frobnicate"}, common...), "dlq needs a subcommand"},
		{append([]string{"dlq", "redrive"}, common...), "give --lane"},
		{append([]string{"dlq", "redrive", "--lane", "premium"}, common...), "no native whole-queue redrive"},
	}
	for _, m := range mistakes {
		out, err := cli(t, m.args...)
		if err == nil || !strings.Contains(out, m.want) {
			t.Errorf("sluicectl %v: err=%v, output %q; want it to mention %q", m.args[:2], err, out, m.want)
		}
	}

	dry, err := cli(t, append([]string{"dlq", "replay", "--tenant", "alpha", "--dry-run"}, common...)...)
	if err != nil || !strings.Contains(dry, "1 of 1 dead-lettered jobs would be replayed") {
		t.Fatalf("dry run: %v: %s", err, dry)
	}
	fixed.Store(true)
	out, err := cli(t, append([]string{"dlq", "replay", "--tenant", "alpha"}, common...)...)
	if err != nil || !strings.Contains(out, "1/1 moved") || !strings.Contains(out, "done") {
		t.Fatalf("replay: %v: %s", err, out)
	}
	base.waitFor(t, []string{poison.GetJobId()})
	if got := base.Job(poison.GetJobId()); got.GetAttempt() != 1 {
		t.Fatalf("replayed job delivered as attempt %d, want a fresh count (1)", got.GetAttempt())
	}
	status, err := cli(t, append([]string{"dlq", "status"}, common...)...)
	if err != nil || strings.Count(status, "\n") != 3 { // header, replay, dry run
		t.Fatalf("dlq status: %v: %s", err, status)
	}
}
