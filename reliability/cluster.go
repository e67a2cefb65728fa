package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/test/fauxqs"
	"github.com/sluice-dev/sluice/topology"
)

// Env is what every scenario needs: the binaries, a work directory, and
// the local SQS-compatible server for the SQS scenarios.
type Env struct {
	Bin Binaries
	// Dir holds each scenario's data directories, config files and process
	// logs.
	Dir string
	// SQSEndpoint is the SQS-compatible server's URL; empty when the SQS
	// scenarios are not run.
	SQSEndpoint string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

func (e *Env) logf(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

// scenarioDir makes a fresh directory for one scenario.
func (e *Env) scenarioDir(name string) (string, error) {
	dir, err := os.MkdirTemp(e.Dir, name+"-")
	if err != nil {
		return "", fmt.Errorf("scenario directory: %w", err)
	}
	return dir, nil
}

// errNoServer is returned by SQS scenarios run without a server.
var errNoServer = errors.New("no SQS-compatible server (Env.SQSEndpoint is empty)")

// Binaries are the paths of the built sluice binaries.
type Binaries struct {
	Gateway string
	Drainer string
}

// Build compiles cmd/gateway and cmd/drainer into dir. The binaries are
// built without the race detector: they run under load for minutes, and
// the e2e tests already run them with it.
func Build(ctx context.Context, dir string) (Binaries, error) {
	if err := testcluster.Build(ctx, dir, false, "gateway", "drainer"); err != nil {
		return Binaries{}, err
	}
	return Binaries{Gateway: filepath.Join(dir, "gateway"), Drainer: filepath.Join(dir, "drainer")}, nil
}

// slot is one role in a cluster (the gateway, a drainer): its command and
// the process currently running it.
type slot struct {
	spec  testcluster.Spec
	ready string // the log message that says it is serving
	p     *testcluster.Proc
	kills int
}

// cluster is a set of sluice processes, a worker they deliver to, and the
// addresses the harness uses to reach them.
type cluster struct {
	env        *Env
	dir        string
	topo       topology.Topology
	worker     *testcluster.Worker
	ingestAddr string
	adminAddr  string // of the process whose admin API the harness reads
	adminKey   string

	mu    sync.Mutex
	slots map[string]*slot
	order []string
}

// clusterConfig describes the processes of a cluster.
type clusterConfig struct {
	Backend string // embedded or sqs
	// SQSEndpoint is the endpoint the processes use (the server, or the
	// fault proxy in front of it).
	SQSEndpoint string
	QueuesYAML  string
	TenantsYAML string
	// Drainers is the number of separate drainer processes (sqs only);
	// with 0 the gateway drains in-process.
	Drainers    int
	Concurrency int
	// ExtraArgs are added to every process's flags.
	ExtraArgs []string
	// WorkerDelay is the worker's longest hold of a job.
	WorkerDelay time.Duration
}

func newCluster(env *Env, dir string, cfg clusterConfig) (*cluster, error) {
	c := &cluster{env: env, dir: dir, slots: map[string]*slot{}, adminKey: "sk_admin_reliability"}
	queues := filepath.Join(dir, "queues.yaml")
	tenants := filepath.Join(dir, "tenants.yaml")
	if err := os.WriteFile(queues, []byte(cfg.QueuesYAML), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(tenants, []byte(cfg.TenantsYAML), 0o600); err != nil {
		return nil, err
	}
	topo, err := topology.Load(queues)
	if err != nil {
		return nil, err
	}
	c.topo = topo
	if c.worker, err = StartWorker(cfg.WorkerDelay); err != nil {
		return nil, err
	}
	if c.ingestAddr, err = testcluster.FreePort(); err != nil {
		return nil, err
	}
	common := []string{
		"--queues", queues, "--tenants", tenants, "--metrics-listen", "", "--admin-key", c.adminKey,
		"--concurrency", fmt.Sprint(max(1, cfg.Concurrency)), "--shutdown-grace", "10s", "--log-level", "info",
	}
	var procEnv []string
	if cfg.Backend == "sqs" {
		common = append(common, "--backend", "sqs", "--sqs-endpoint", cfg.SQSEndpoint, "--aws-region", fauxqs.Region)
		procEnv = testcluster.SQSEnv
	}
	common = append(common, cfg.ExtraArgs...)

	gwArgs := append([]string{"--listen", c.ingestAddr, "--data-dir", filepath.Join(dir, "gateway")}, common...)
	if cfg.Backend == "sqs" {
		gwArgs = append(gwArgs, "--create-queues")
	}
	if cfg.Drainers == 0 {
		if c.adminAddr, err = testcluster.FreePort(); err != nil {
			return nil, err
		}
		gwArgs = append(gwArgs, "--admin-listen", c.adminAddr, "--worker-addr", c.worker.Addr)
	} else {
		gwArgs = append(gwArgs, "--drain=false")
	}
	c.add("gateway", testcluster.Spec{Path: c.env.Bin.Gateway, Args: gwArgs, Env: procEnv}, "gateway listening")
	for i := range cfg.Drainers {
		addr, err := testcluster.FreePort()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			c.adminAddr = addr
		}
		args := append([]string{"run", "--admin-listen", addr, "--data-dir", filepath.Join(dir, fmt.Sprintf("drainer-%d", i)), "--worker-addr", c.worker.Addr}, common...)
		c.add(fmt.Sprintf("drainer-%d", i), testcluster.Spec{Path: c.env.Bin.Drainer, Args: args, Env: procEnv}, "admin API listening")
	}
	return c, nil
}

func (c *cluster) add(name string, spec testcluster.Spec, ready string) {
	spec.Name = name
	spec.LogPath = filepath.Join(c.dir, name+".log")
	c.slots[name] = &slot{spec: spec, ready: ready}
	c.order = append(c.order, name)
}

// names returns the roles in start order.
func (c *cluster) names() []string { return c.order }

// start starts a role and waits until it serves.
func (c *cluster) start(ctx context.Context, name string) error {
	c.mu.Lock()
	s := c.slots[name]
	c.mu.Unlock()
	p, err := testcluster.Start(s.spec)
	if err != nil {
		return err
	}
	c.mu.Lock()
	s.p = p
	c.mu.Unlock()
	if _, err := p.WaitLog(ctx, s.ready, 2*time.Minute); err != nil {
		p.Kill()
		return err
	}
	return nil
}

// startAll starts every role in order.
func (c *cluster) startAll(ctx context.Context) error {
	for _, n := range c.order {
		if err := c.start(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// kill sends SIGKILL to a role and waits for its exit.
func (c *cluster) kill(name string) {
	c.mu.Lock()
	s := c.slots[name]
	s.kills++
	p := s.p
	c.mu.Unlock()
	p.Kill()
}

// proc returns the process currently running a role.
func (c *cluster) proc(name string) *testcluster.Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slots[name].p
}

// kills returns the SIGKILLs per role.
func (c *cluster) kills() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for n, s := range c.slots {
		out[n] = s.kills
	}
	return out
}

// stopAll sends SIGTERM to every running role (drainers first, then the
// gateway) and reports any that did not exit cleanly.
func (c *cluster) stopAll() error {
	var errs []string
	for i := len(c.order) - 1; i >= 0; i-- {
		p := c.proc(c.order[i])
		if p == nil {
			continue
		}
		select {
		case <-p.Done():
			continue // killed, or exited by itself (reported by its caller)
		default:
		}
		if err := p.Stop(30 * time.Second); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", c.order[i], err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stop: %s", strings.Join(errs, "; "))
	}
	return nil
}

// close kills whatever still runs and stops the worker.
func (c *cluster) close() {
	for _, n := range c.order {
		if p := c.proc(n); p != nil {
			select {
			case <-p.Done():
			default:
				p.Kill()
			}
		}
	}
	c.worker.Stop()
}

// depths reads the live queues' and the DLQs' message counts through the
// admin API.
func (c *cluster) depths(ctx context.Context) (live, dlq int64, err error) {
	conn, err := testcluster.Dial(c.adminAddr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := adminv1.NewAdminServiceClient(conn).GetQueueStats(testcluster.WithKey(ctx, c.adminKey), &adminv1.GetQueueStatsRequest{})
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
