package reliability

import (
	"context"
	"fmt"
	"time"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/topology"
)

// Env is what every scenario needs: the binaries, a work directory and
// the local SQS-compatible server (testcluster.Env), and where progress
// goes.
type Env struct {
	*testcluster.Env
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

func (e *Env) logf(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

// cluster is a set of sluice processes and the worker they deliver to.
type cluster struct {
	*testcluster.Cluster
	worker *testcluster.Worker
}

// newCluster starts a worker that holds each job up to workerDelay, and
// declares a cluster delivering to it; start it with Start.
func newCluster(ctx context.Context, env *Env, workerDelay time.Duration, cfg testcluster.ClusterConfig) (*cluster, error) {
	w, err := StartWorker(workerDelay)
	if err != nil {
		return nil, err
	}
	cfg.WorkerAddr = w.Addr
	if cfg.Pull {
		cfg.PullForward = w.Addr
	}
	c, err := env.NewCluster(ctx, cfg)
	if err != nil {
		w.Stop()
		return nil, err
	}
	return &cluster{Cluster: c, worker: w}, nil
}

// close stops whatever still runs and the worker.
func (c *cluster) close() {
	_ = c.Close()
	c.worker.Stop()
}

// depths reads the live queues' and the DLQs' message counts through the
// admin API.
func (c *cluster) depths(ctx context.Context) (live, dlq int64, err error) {
	conn, err := testcluster.Dial(c.AdminAddr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := adminv1.NewAdminServiceClient(conn).GetQueueStats(testcluster.WithKey(ctx, c.AdminKey), &adminv1.GetQueueStatsRequest{})
	if err != nil {
		return 0, 0, fmt.Errorf("admin GetQueueStats: %w", err)
	}
	for _, q := range resp.GetQueues() {
		n := q.GetVisible() + q.GetInFlight() + q.GetDelayed()
		if q.GetKind() == string(topology.KindDLQ) {
			dlq += n
		} else {
			live += n
		}
	}
	return live, dlq, nil
}

// drainAndStop lets the cluster drain (see drain), up to timeout, and
// stops it, adding what went wrong to problems; it returns how long the
// drain took.
func (c *cluster) drainAndStop(ctx context.Context, ledger *Ledger, timeout time.Duration, problems *[]string) time.Duration {
	took, err := c.drain(ctx, ledger, timeout)
	for _, err := range []error{err, c.Close()} {
		if err != nil {
			*problems = append(*problems, err.Error())
		}
	}
	return took
}

// drain waits until every acknowledged job that can be delivered has been,
// the dead-letter queues hold at least as many messages as acknowledged
// jobs bound for them, and the live queues are empty, in drainQuiet
// consecutive checks; or until timeout. It returns how long it waited.
//
// One check is not enough: the queues' counts are read one queue at a
// time, so a job moving between two queues (a stale poison job going to
// the backlog, say) can be missed by both reads, and the harness would
// stop the drainers with it on the way and count it lost.
func (c *cluster) drain(ctx context.Context, ledger *Ledger, timeout time.Duration) (time.Duration, error) {
	const drainQuiet = 4 // checks, 250 ms apart
	start := time.Now()
	deadline := start.Add(timeout)
	want := ledger.AckedIDs()
	quiet := 0
	for {
		missing, bound := 0, int64(0)
		for id, kind := range want {
			switch {
			case c.worker.Delivered(id):
			case kind == KindOK || kind == KindFlaky:
				missing++
			default: // poison or doomed: on its way to a DLQ
				bound++
			}
		}
		live, dlq, err := c.depths(ctx)
		if err == nil && missing == 0 && live == 0 && dlq >= bound {
			quiet++
		} else {
			quiet = 0
		}
		if quiet == drainQuiet {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("not drained after %s: %d acknowledged jobs not delivered, %d messages in live queues, %d in DLQs for %d acknowledged jobs bound there (last stats error: %w)",
				timeout, missing, live, dlq, bound, err)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
