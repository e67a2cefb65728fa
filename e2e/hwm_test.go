package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// stuck takes every job and never finishes it, so the drainers hold
// every job they read: delivering, or read ahead and waiting for a slot.
func stuck(ctx context.Context, _ *workerv1.ProcessRequest, _ int) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestHighWaterMarkCountsHeldJobs floods the standard lane (mark 5, so the
// standard tier is refused from 4) while a stuck worker makes the drainers
// hold every job in flight: the gateway still refuses at the mark, with a
// RetryInfo, on both backends, and keeps refusing after its depths are
// read again (the jobs are in flight, not gone).
func TestHighWaterMarkCountsHeldJobs(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{testcluster.Embedded, testcluster.SQS} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := startAnsweringWorker(t, stuck)
			// On SQS, a gateway and a drainer process; depths are read every
			// second on both backends.
			drainers := 0
			if backend == testcluster.SQS {
				drainers = 1
			}
			cl := startCluster(t, testcluster.ClusterConfig{
				Backend: backend, Queues: fmt.Sprintf("prefix: hwm%d\n%s", os.Getpid(), queuesYAML), Tenants: tenantsYAML,
				Drainers: drainers, WorkerAddr: w.Addr, Concurrency: 2,
				Args: []string{"--shutdown-grace", "1s"}, GatewayArgs: []string{"--depth-interval", "1s"},
			})
			c := client(t, cl.Addr)
			submit := func() error {
				_, err := c.Submit(withKey(t.Context(), "beta-key-1234"), &ingestv1.SubmitRequest{Payload: []byte("x")})
				return err
			}
			checkRefusal(t, fillStandardLane(t, c))
			// Wait until the drainers hold the jobs (the worker has some),
			// then past two depth reads: the held jobs still count.
			eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { return w.Calls() > 0 },
				"the drainers never delivered a job to the worker")
			time.Sleep(2500 * time.Millisecond)
			for i := range 5 {
				err := submit()
				if err == nil {
					t.Fatalf("submit %d after the depth reads was accepted: jobs held in flight were not counted", i)
				}
				checkRefusal(t, err)
			}
		})
	}
}

func checkRefusal(t *testing.T, err error) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("err = %v, want RESOURCE_EXHAUSTED", err)
	}
	if d := detail[*errdetails.RetryInfo](st).GetRetryDelay().AsDuration(); d < time.Second {
		t.Fatalf("retry delay %s, want at least 1s", d)
	}
}
